"""Submitting requests: checked input, then one round trip that creates a
request and registers it with its queue (`create` + `enqueue`), or one
script call for a request of one item (`submit_one`, which may hand it to
an idle worker), or a streamed request opened now and fed later (`begin`,
`add`, `finalize`). A submission that fails part way is taken back. The
`submission` collaborator of QueueClient (queue_client.py); no Django here.
"""
from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import redis

from queueadmin.core.engine.client.coalesce import Coalescer
from queueadmin.core.engine.client.dedup import INTERNAL, check_scope as _scope, default_dedup_key, scoped_key
from queueadmin.core.engine.client.limits import check_dedup_key, check_text, payloads as checked_payloads
from queueadmin.core.engine.client.reads import Reads
from queueadmin.core.engine.config import MAX_CONCURRENCY, QueueConfig
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features import chains, encryption, groups, ratelimit, schedule, webhook_store
from queueadmin.core.engine.hooks import HOOKS
from queueadmin.core.engine.store import Store
from queueadmin.core.engine.store.keys import slot_tag
from queueadmin.core.engine.store.packed import PackedGate
from queueadmin.core.engine.store.queue_slot import EnqueueCode, Enqueued
from queueadmin.core.engine.store.scripts import Code, ScriptError

log = logging.getLogger("queueadmin.client")

CHUNK = 2000  # items per script call when creating a large request
CONFIG_MAX_AGE = 2.0  # seconds a producer trusts its copy of a queue's defaults


@dataclass(frozen=True)
class Submission:
    id: str
    duplicate: bool = False
    scheduled: bool = False


def new_request_id(queue: str | None = None) -> str:
    """Sortable by creation time (ms, hex) with random bits against collisions;
    with a queue, for a one-item request made in the queue's slot (keys.py)."""
    rid = f"{int(time.time() * 1000):011x}{secrets.token_hex(3)}"
    return f"{rid}-{slot_tag(queue)}" if queue else rid


class Submitter:
    def __init__(self, client, store: Store, reads: Reads, queue_config: Callable[..., QueueConfig],
                 processors: set[str] | None, channel: str):
        self.client = client  # what webhook_store.watch and schedule.add are given (they take a client)
        self.store, self.redis, self.keys = store, store.redis, store.keys
        self.reads, self.queue_config = reads, queue_config
        self.processors, self.channel = processors, channel
        self.together = Coalescer(store.trip)  # concurrent one-item submits share round trips
        self.gate = PackedGate(store.redis, store.keys)  # packed one-item requests, unless old workers serve

    def validate(self, queue: str, processor: str, priority, concurrency) -> tuple[QueueConfig, int, int]:
        check_text(queue, "the queue name")
        check_text(processor, "the processor name")
        config = self.queue_config(queue, max_age=CONFIG_MAX_AGE)
        if self.processors is not None and processor not in self.processors:
            raise QueueError(f"unknown processor {processor!r} (known: {', '.join(sorted(self.processors))})")
        priority = config.priority if priority is None else priority
        concurrency = config.concurrency if concurrency is None else concurrency
        if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 99:
            raise QueueError("priority must be an integer between 0 and 99")
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or not 1 <= concurrency <= MAX_CONCURRENCY:
            raise QueueError(f"concurrency must be an integer between 1 and {MAX_CONCURRENCY}")
        return config, priority, concurrency

    def submit(self, queue: str, processor: str, items: Iterable[Any], *, priority: int | None = None,
               concurrency: int | None = None, delay: float = 0, expires_in: float | None = None,
               dedup_key: str | None = None, dedup: bool = True, time_limit: float | None = None,
               callback_url: str | None = None, callback_signer: str = "", then: dict | None = None,
               rate_limit: str | None = None, request_id: str | None = None,
               parent: str | None = None, dedup_scope: str = INTERNAL, group: str | None = None) -> Submission:
        """See QueueClient.submit."""
        config, priority, concurrency = self.validate(queue, processor, priority, concurrency)
        group = groups.check_group(group)
        then = self._then(then, queue)
        dedup_key, dedup_scope = check_dedup_key(dedup_key), _scope(dedup_scope)
        payloads = checked_payloads(items)  # QueueError on text that is not valid Unicode, or over a cap
        if not payloads:
            raise QueueError("a request needs at least one item")
        delay_ms, expires_ms = _ms(delay, "delay"), _ms(expires_in or 0, "expiry")
        if dedup and dedup_key is None:
            dedup_key = default_dedup_key(processor, payloads, keyed=config.encrypt)
        if config.encrypt:  # sealed at rest, opened by the worker (features/encryption.py)
            payloads = encryption.seal_all(payloads)
        lean = len(payloads) == 1 and not request_id and not schedule.is_far(delay_ms)
        rid = request_id or new_request_id(queue if lean else None)
        meta = dict(id=rid, queue=queue, processor=processor, priority=priority, concurrency=concurrency,
                    state="scheduled" if delay_ms else "queued",
                    dedup_key=scoped_key(dedup_scope, dedup_key or "") if dedup else "")
        _time_limit(meta, time_limit)
        _callback(meta, callback_url, callback_signer)
        rate = _rate_limit(meta, rate_limit)
        if then:
            meta["then"] = json.dumps(then)
        if parent:
            meta["parent"] = parent
        if group:
            meta["group"] = group
        if HOOKS.active:
            _headers(meta)
        if lean:
            return self._submit_one(config, rid, meta, payloads[0], delay_ms, expires_ms, rate, then, callback_url)
        first, rest = payloads[:CHUNK], payloads[CHUNK:]
        trip = self.store.trip()
        created = [self.store.request.create(rid, meta, first, delay_ms=delay_ms, expires_ms=expires_ms,
                                             finalized=not rest, trip=trip)]
        for start in range(0, len(rest), CHUNK):
            last = start + CHUNK >= len(rest)
            created.append(self.store.request.add(rid, rest[start:start + CHUNK], finalize=last, trip=trip))
        enqueued = self.enqueue(trip, queue, rid, priority, concurrency, meta["dedup_key"], delay_ms, len(payloads),
                                rate, group=group)
        if then:
            trip.pipe.zadd(self.keys.chains, {rid: int(time.time() * 1000)})  # until its follow-up exists
        try:
            trip.run()
        except redis.RedisError:
            if not request_id:  # a derived id may name a request another process made: leave it be
                self.undo(queue, rid, meta["dedup_key"])
            raise
        for n, answer in enumerate(created):
            try:
                answer.value
            except ScriptError as exc:
                # a follow-up submitted again: created before, registered again (harmless)
                if not (n == 0 and request_id and exc.code == Code.EXISTS):
                    raise
        if callback_url:
            webhook_store.watch(self.client, rid)
        return self._enqueued(rid, enqueued.value)

    def _submit_one(self, config: QueueConfig, rid: str, meta: dict, payload: str, delay_ms: int,
                    expires_ms: int, rate, then, callback_url) -> Submission:
        """A one-item request, made in its queue's slot: created and registered
        by one script (nothing is created for a duplicate), which hands it to
        an idle worker when it can (handoff.py)."""
        queue = meta["queue"]
        terms = dict(priority=meta["priority"], concurrency=meta["concurrency"], dedup_key=meta["dedup_key"],
                     packed=self.gate.allows(queue), lane=self.gate.lanes(queue),
                     compact=self.gate.compact(queue),
                     delay_ms=delay_ms, expires_ms=expires_ms, rate_spec=rate.spec if rate else "",
                     lease_ms=config.lease_ms, max_attempts=config.max_attempts, retention_ms=config.retention_ms,
                     channel=self.channel)
        try:
            if then:
                trip = self.store.trip()
                submitted = self.store.queue.submit_one(queue, rid, meta, payload, **terms, trip=trip)
                trip.pipe.zadd(self.keys.chains, {rid: int(time.time() * 1000)})  # until its follow-up exists
                trip.run()
                answer = submitted.value
            else:  # alone, or on one pipeline with the calls of other threads (coalesce.py)
                answer = self.together.call(
                    lambda trip: self.store.queue.submit_one(queue, rid, meta, payload, **terms, trip=trip))
        except redis.RedisError:
            self.undo(queue, rid, meta["dedup_key"])
            raise
        if answer.code == EnqueueCode.DUPLICATE:
            if then:
                self.redis.zrem(self.keys.chains, rid)
            return Submission(answer.id, duplicate=True)
        if callback_url:
            webhook_store.watch(self.client, rid)
        return Submission(rid, scheduled=answer.code == EnqueueCode.SCHEDULED)

    def _then(self, then: dict | None, queue: str) -> dict | None:
        """A checked `then`, whose processor and queue must exist now."""
        if then is None:
            return None
        then = chains.spec(then, queue)
        self.validate(then["queue"], then["processor"], then.get("priority"), then.get("concurrency"))
        if then.get("time_limit") is not None:
            _ms(then["time_limit"], "then.time_limit")
        return then

    def begin(self, queue: str, processor: str, *, priority: int | None = None, concurrency: int | None = None,
              delay: float = 0, expires_in: float | None = None, dedup_key: str | None = None,
              time_limit: float | None = None, callback_url: str | None = None,
              callback_signer: str = "", rate_limit: str | None = None,
              dedup_scope: str = INTERNAL, group: str | None = None) -> Submission:
        """See QueueClient.begin."""
        _, priority, concurrency = self.validate(queue, processor, priority, concurrency)
        group = groups.check_group(group)
        dedup_key, dedup_scope = check_dedup_key(dedup_key), _scope(dedup_scope)
        delay_ms, expires_ms = _ms(delay, "delay"), _ms(expires_in or 0, "expiry")
        rid = new_request_id()
        meta = dict(id=rid, queue=queue, processor=processor, priority=priority, concurrency=concurrency,
                    state="scheduled" if delay_ms else "queued", dedup_key=scoped_key(dedup_scope, dedup_key or ""),
                    streamed=1)
        if group:
            meta["group"] = group
        if HOOKS.active:
            _headers(meta)
        _time_limit(meta, time_limit)
        _callback(meta, callback_url, callback_signer)
        rate = _rate_limit(meta, rate_limit)
        trip = self.store.trip()
        created = self.store.request.create(rid, meta, [], delay_ms=delay_ms, expires_ms=expires_ms, finalized=False,
                                            trip=trip)
        enqueued = self.enqueue(trip, queue, rid, priority, concurrency, meta["dedup_key"], delay_ms, rate=rate,
                                group=group)
        try:
            trip.run()
        except redis.RedisError:
            self.undo(queue, rid, meta["dedup_key"])
            raise
        created.value  # raises a refusal
        if callback_url:
            webhook_store.watch(self.client, rid)
        return self._enqueued(rid, enqueued.value)

    def add(self, rid: str, items: Iterable[Any], finalize: bool = False) -> int:
        """See QueueClient.add."""
        meta = self.reads.meta(check_text(rid, "the request id"))
        config = self.queue_config(meta["queue"])
        payloads = checked_payloads(items)
        if config.encrypt:
            payloads = encryption.seal_all(payloads)
        total = int(meta.get("total", 0))
        chunks = [payloads[i:i + CHUNK] for i in range(0, len(payloads), CHUNK)] or [[]]
        closed = False
        for n, chunk in enumerate(chunks):
            try:
                total, closed = self.store.request.add(rid, chunk, finalize=finalize and n == len(chunks) - 1,
                                                       retention_ms=config.retention_ms, channel=self.channel)
            except ScriptError as exc:
                raise QueueError(refusal(rid, exc.code)) from exc
        if closed:
            self.store.queue.retire(meta["queue"], rid, meta.get("dedup_key", ""))
        elif payloads:
            self.unpark(meta["queue"], rid)
        return total

    def undo(self, queue: str, rid: str, dedup_key: str) -> None:
        """A submission failed part way (Redis full, or gone): take back what
        got stored, so that no request is left half made (created but never
        queued, or queued without all its items). The caller sees the error."""
        try:
            self.redis.delete(*self.keys.request(rid).all())
            self.redis.zrem(self.keys.chains, rid)
            self.store.queue.retire(queue, rid, dedup_key)
        except redis.RedisError:
            log.warning("request %s: a failed submission could not be taken back", rid)

    def enqueue(self, trip, queue, rid, priority, concurrency, dedup_key, delay_ms, items=None, rate=None, group=None):
        """Register with the queue, on `trip`; `items` (when known) caps the
        tokens made; `rate`, the request's own rate limit, goes where claims
        check it; `group`, its group (features/groups.py). A far-off request's time goes to a schedule shard first
        (schedule.py). Returns enqueue's Answer."""
        far = schedule.is_far(delay_ms)
        if far:
            schedule.add(self.client, queue, rid, delay_ms)
        return self.store.queue.enqueue(queue, rid, priority=priority, concurrency=concurrency, dedup_key=dedup_key,
                                        delay_ms=delay_ms, tokens=concurrency if items is None else items, far=far,
                                        rate_spec=rate.spec if rate else "", group=group or "", trip=trip)

    def unpark(self, queue: str, rid: str) -> None:
        """Wake a request's parked tokens (new items, retried dead letters, requeued items)."""
        try:
            self.store.queue.unpark(queue, rid)
        except ScriptError:
            pass  # not registered: finished meanwhile, nothing to wake

    def _enqueued(self, rid: str, answer: Enqueued) -> Submission:
        if answer.code == EnqueueCode.DUPLICATE:  # drop the copy we just created
            self.redis.delete(*self.keys.request(rid).all())
            return Submission(answer.id, duplicate=True)
        return Submission(rid, scheduled=answer.code == EnqueueCode.SCHEDULED)


def refusal(rid: str, code: Code) -> str:
    """What a user reads when a script refused a request's change."""
    return {
        Code.NOT_FOUND: f"unknown request {rid!r}",
        Code.FINISHED: f"request {rid} is already finished",
        Code.FINALIZED: f"request {rid} is finalized: no more items can be added",
        Code.NOT_HELD: f"request {rid}: not held",
        Code.EXISTS: f"request {rid} exists already",
    }[code]


def _ms(seconds: float, what: str) -> int:
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        raise QueueError(f"{what} must be a number of seconds") from None
    if not 0 <= value <= 10 * 365 * 86400:  # NaN too
        raise QueueError(f"{what} must be between 0 seconds and 10 years")
    return int(value * 1000)


def _time_limit(meta: dict, seconds: float | None) -> None:
    """A per-request time limit (seconds; 0 = none) goes into the meta hash,
    where `take` hands it to workers; absent, the queue's setting applies."""
    if seconds is None:
        return
    if isinstance(seconds, bool):
        raise QueueError("time limit must be a number of seconds")
    meta["time_limit"] = _ms(seconds, "time limit") / 1000


def _rate_limit(meta: dict, text: str | None) -> ratelimit.Rate | None:
    """A request's own rate limit, kept in its meta hash in canonical form."""
    try:
        rate = ratelimit.parse(text)
    except ratelimit.RateLimitError as exc:
        raise QueueError(str(exc)) from None
    if rate:
        meta["rate_limit"] = rate.text
    return rate


def _callback(meta: dict, url: str | None, signer: str) -> None:
    """A webhook target goes into the meta hash with who signs its delivery
    ("" the site, "token:N" an API token); the network policy is the web
    side's (core/webhooks/), here only its shape."""
    if url is None:
        return
    if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")) or len(url) > 2000:
        raise QueueError("the callback URL must be an http:// or https:// URL of at most 2000 characters")
    meta["callback_url"] = check_text(url, "the callback URL")
    if signer:
        meta["callback_signer"] = signer


def _headers(meta: dict) -> None:
    """What the installed hooks carry with the request (a trace's context:
    hooks.py), kept in its meta as JSON."""
    headers = HOOKS.headers(meta["queue"], meta["processor"])
    if headers:
        meta["headers"] = json.dumps(headers, separators=(",", ":"))
