"""The producer and operator API of the queue engine.

Everything here is a thin Python face over the Lua scripts: queues, and
submission (whole or streamed); reading is in reads.py and steering live
requests (cancel, priority, concurrency, requeue, retry) in steering.py,
both mixed into `QueueClient`. No Django in here.
"""
from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, Iterable

import redis

from queueadmin.core.engine.features import ratelimit, schedule, webhook_store
from queueadmin.core.engine.config import MAX_CONCURRENCY, QueueConfig
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.store.keys import GROUP, Keys, QueueKeys, RequestKeys, slot_tag
from queueadmin.core.engine.client.dedup import INTERNAL, check_scope as _scope, default_dedup_key, scoped_key
from queueadmin.core.engine.client.limits import check_dedup_key, check_text, payloads as checked_payloads
from queueadmin.core.engine.client.reads import TERMINAL, Reads, parse_status
from queueadmin.core.engine.store.scripts import Code, Scripts, ScriptError, check
from queueadmin.core.engine.client.steering import Steering, refusal as _refusal

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


class QueueClient(Steering, Reads):
    def __init__(self, redis, prefix: str = "qa", processors: Iterable[str] | None = None,
                 channel: str | None = None):
        self.redis = redis
        self.keys = Keys(prefix)
        self.scripts = Scripts(redis)
        self.processors = set(processors) if processors is not None else None
        self.channel = self.keys.events_all if channel is None else channel
        self._configs: dict[str, tuple[float, QueueConfig]] = {}  # so a submission is one round trip
        self._submit_one_keys: dict[str, list[str]] = {}  # queue -> its keys for submit_one

    # -- queues ---------------------------------------------------------------

    def define_queue(self, name: str, config: QueueConfig | None = None) -> QueueConfig:
        if not name or len(name) > 64 or not all(c.isalnum() or c in "-_." for c in name):
            raise QueueError("queue names are 1-64 letters, digits, '-', '_' or '.'")
        config = config or QueueConfig()
        try:
            config.validate()
        except ValueError as exc:
            raise QueueError(str(exc)) from exc
        qk = self.keys.queue(name)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(qk.config, mapping=config.to_redis())
        pipe.sadd(self.keys.queues, name)
        if not config.paused:
            pipe.rpush(qk.wake, 1)  # a resumed queue wakes its idle workers
        pipe.execute()
        return config

    def queues(self) -> list[str]:
        return sorted(self.redis.smembers(self.keys.queues))

    def queue_config(self, name: str, max_age: float = 0.0) -> QueueConfig:
        """A queue's settings; `max_age` > 0 accepts a copy read that recently."""
        cached = self._configs.get(name)
        if cached and time.monotonic() - cached[0] <= max_age:
            return cached[1]
        raw = self.redis.hgetall(self.keys.queue(name).config)
        if not raw:
            raise QueueError(f"unknown queue {name!r}")
        config = QueueConfig.from_redis(raw)
        self._configs[name] = (time.monotonic(), config)
        return config

    def set_paused(self, name: str, paused: bool) -> None:
        qk = self.keys.queue(name)
        self.queue_config(name)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(qk.config, "paused", int(paused))
        if not paused:
            pipe.rpush(qk.wake, 1)
        pipe.execute()

    # -- submission -----------------------------------------------------------

    def _validate(self, queue: str, processor: str, priority, concurrency) -> tuple[QueueConfig, int, int]:
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
               parent: str | None = None, dedup_scope: str = INTERNAL) -> Submission:
        """Submit a request of items. A duplicate of a pending or running request
        (same de-dup key; by default a hash of processor and items) returns it,
        within `dedup_scope` (whose submissions may be its duplicates: a user's).
        `time_limit` (seconds, 0 = none) overrides the queue's per-item limit.
        `callback_url`: POST the summary there when it finishes (core/webhooks.py).
        `then`: the request that follows this one (core/engine/chains.py).
        `rate_limit` (`20/s`, `600/min`, ...): at most that many of its items
        start in any such window, across all workers (ratelimit.py).
        `request_id` and `parent` are for follow-ups: a fixed id, and its parent."""
        config, priority, concurrency = self._validate(queue, processor, priority, concurrency)
        then = self._then(then, queue)
        dedup_key, dedup_scope = check_dedup_key(dedup_key), _scope(dedup_scope)
        payloads = checked_payloads(items)  # QueueError on text that is not valid Unicode, or over a cap
        if not payloads:
            raise QueueError("a request needs at least one item")
        delay_ms, expires_ms = _ms(delay, "delay"), _ms(expires_in or 0, "expiry")
        if dedup and dedup_key is None:
            dedup_key = default_dedup_key(processor, payloads)
        lean = len(payloads) == 1 and not request_id and not schedule.is_far(delay_ms)
        rid = request_id or new_request_id(queue if lean else None)
        rk = self.keys.request(rid)
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
        if lean:
            return self._submit_one(config, rk, meta, payloads[0], delay_ms, expires_ms, rate, then, callback_url)
        first, rest = payloads[:CHUNK], payloads[CHUNK:]
        pipe = self.redis.pipeline(transaction=False)
        self.scripts.pipe(pipe, "create", [rk.meta, rk.items],
                          [delay_ms, expires_ms, 0 if rest else 1, *_fields(meta), *first])
        for start in range(0, len(rest), CHUNK):
            last = start + CHUNK >= len(rest)
            self.scripts.pipe(pipe, "add", rk.all(), [1 if last else 0, 0, "", *rest[start:start + CHUNK]])
        self._enqueue(pipe, queue, rid, priority, concurrency, meta["dedup_key"], delay_ms, len(payloads), rate)
        if then:
            pipe.zadd(self.keys.chains, {rid: int(time.time() * 1000)})  # until its follow-up exists
        try:
            answers = self.scripts.execute(pipe)
        except redis.RedisError:
            if not request_id:  # a derived id may name a request another process made: leave it be
                self._undo_submit(queue, rid, meta["dedup_key"])
            raise
        if then:
            answers.pop()
        if request_id and isinstance(answers[0], int) and answers[0] == Code.EXISTS:
            answers[0] = 0  # a follow-up submitted again: created before, registered again (harmless)
        for a in answers[:-1]:
            check("create", a)
        if callback_url:
            webhook_store.watch(self, rid)
        return self._enqueued(rid, answers[-1])

    def _submit_one(self, config: QueueConfig, rk: RequestKeys, meta: dict, payload: str, delay_ms: int,
                    expires_ms: int, rate, then, callback_url) -> Submission:
        """A one-item request, made in its queue's slot: created and registered
        by one script (nothing is created for a duplicate), which hands it to
        an idle worker when it can (handoff.py)."""
        queue = meta["queue"]
        keys = self._submit_one_keys.get(queue)
        if keys is None:  # the queue's part of the keys, made once
            qk = self.keys.queue(queue)
            keys = self._submit_one_keys[queue] = [qk.tokens, qk.seq, qk.reqs, qk.wake, qk.dedup, qk.sched, qk.index,
                                                   qk.rate, qk.held, qk.leases, qk.config, qk.idle, qk.can]
        keys = [*rk.all(), *keys]
        args = [rk.rid, meta["priority"], meta["concurrency"], meta["dedup_key"], delay_ms, expires_ms, 0,
                rate.spec if rate else "", config.lease_ms, config.max_attempts, config.retention_ms, self.channel,
                *_fields(meta), payload]
        try:
            if then:
                pipe = self.redis.pipeline(transaction=False)
                self.scripts.pipe(pipe, "submit_one", keys, args)
                pipe.zadd(self.keys.chains, {rk.rid: int(time.time() * 1000)})  # until its follow-up exists
                answer = check("submit_one", self.scripts.execute(pipe)[0])
            else:  # a lone call, no pipeline: the leanest round trip
                answer = self.scripts("submit_one", keys, args)
        except redis.RedisError:
            self._undo_submit(queue, rk.rid, meta["dedup_key"])
            raise
        if int(answer[0]) == 2:
            if then:
                self.redis.zrem(self.keys.chains, rk.rid)
            return Submission(answer[1], duplicate=True)
        if callback_url:
            webhook_store.watch(self, rk.rid)
        return Submission(rk.rid, scheduled=int(answer[0]) == 1)

    def _then(self, then: dict | None, queue: str) -> dict | None:
        """A checked `then`, whose processor and queue must exist now."""
        if then is None:
            return None
        from queueadmin.core.engine.features import chains

        then = chains.spec(then, queue)
        self._validate(then["queue"], then["processor"], then.get("priority"), then.get("concurrency"))
        if then.get("time_limit") is not None:
            _ms(then["time_limit"], "then.time_limit")
        return then

    def begin(self, queue: str, processor: str, *, priority: int | None = None, concurrency: int | None = None,
              delay: float = 0, expires_in: float | None = None, dedup_key: str | None = None,
              time_limit: float | None = None, callback_url: str | None = None,
              callback_signer: str = "", rate_limit: str | None = None,
              dedup_scope: str = INTERNAL) -> Submission:
        """Open a streamed request: add items with `add`, then `finalize`.
        De-duplication applies only with an explicit key (items are unknown yet)."""
        _, priority, concurrency = self._validate(queue, processor, priority, concurrency)
        dedup_key, dedup_scope = check_dedup_key(dedup_key), _scope(dedup_scope)
        delay_ms, expires_ms = _ms(delay, "delay"), _ms(expires_in or 0, "expiry")
        rid = new_request_id()
        rk = self.keys.request(rid)
        meta = dict(id=rid, queue=queue, processor=processor, priority=priority, concurrency=concurrency,
                    state="scheduled" if delay_ms else "queued", dedup_key=scoped_key(dedup_scope, dedup_key or ""),
                    streamed=1)
        _time_limit(meta, time_limit)
        _callback(meta, callback_url, callback_signer)
        rate = _rate_limit(meta, rate_limit)
        pipe = self.redis.pipeline(transaction=False)
        self.scripts.pipe(pipe, "create", [rk.meta, rk.items], [delay_ms, expires_ms, 0, *_fields(meta)])
        self._enqueue(pipe, queue, rid, priority, concurrency, meta["dedup_key"], delay_ms, rate=rate)
        try:
            answers = self.scripts.execute(pipe)
        except redis.RedisError:
            self._undo_submit(queue, rid, meta["dedup_key"])
            raise
        check("create", answers[0])
        if callback_url:
            webhook_store.watch(self, rid)
        return self._enqueued(rid, answers[1])

    def add(self, rid: str, items: Iterable[Any], finalize: bool = False) -> int:
        """Add items to a streamed request; returns its total so far."""
        meta = self._meta_or_raise(check_text(rid, "the request id"))
        config = self.queue_config(meta["queue"])
        payloads = checked_payloads(items)
        rk = self.keys.request(rid)
        total = int(meta.get("total", 0))
        chunks = [payloads[i:i + CHUNK] for i in range(0, len(payloads), CHUNK)] or [[]]
        closed = 0
        for n, chunk in enumerate(chunks):
            fin = 1 if finalize and n == len(chunks) - 1 else 0
            try:
                total, closed = self.scripts("add", rk.all(), [fin, config.retention_ms, self.channel, *chunk])
            except ScriptError as exc:
                raise QueueError(_refusal(rid, exc.code)) from exc
        if closed:
            self._retire(meta["queue"], rid, meta.get("dedup_key", ""))
        elif payloads:
            self._unpark(meta["queue"], rid)
        return total

    def finalize(self, rid: str) -> int:
        return self.add(rid, [], finalize=True)

    def _undo_submit(self, queue: str, rid: str, dedup_key: str) -> None:
        """A submission failed part way (Redis full, or gone): take back what
        got stored, so that no request is left half made (created but never
        queued, or queued without all its items). The caller sees the error."""
        try:
            self.redis.delete(*self.keys.request(rid).all())
            self.redis.zrem(self.keys.chains, rid)
            self._retire(queue, rid, dedup_key)
        except redis.RedisError:
            log.warning("request %s: a failed submission could not be taken back", rid)

    def _enqueue(self, pipe, queue, rid, priority, concurrency, dedup_key, delay_ms, items=None, rate=None):
        """Register with the queue; `items` (when known) caps the tokens made;
        `rate`, the request's own rate limit, goes where claims check it.
        A far-off request's time goes to a schedule shard first (schedule.py)."""
        qk = self.keys.queue(queue)
        far = schedule.is_far(delay_ms)
        if far:
            schedule.add(self, queue, rid, delay_ms)
        self.scripts.pipe(pipe, "enqueue", [qk.tokens, qk.seq, qk.reqs, qk.wake, qk.dedup, qk.sched, qk.index,
                                            qk.rate],
                          [rid, priority, concurrency, dedup_key, delay_ms, concurrency if items is None else items,
                           1 if far else 0, rate.spec if rate else ""])

    def _enqueued(self, rid: str, answer) -> Submission:
        code, other = int(answer[0]), answer[1]
        if code == 2:  # duplicate: drop the copy we just created
            self.redis.delete(*self.keys.request(rid).all())
            return Submission(other, duplicate=True)
        return Submission(rid, scheduled=code == 1)

def _fields(meta: dict) -> list:
    """A mapping as the count-prefixed field/value list the create script takes."""
    flat = [len(meta)]
    for k, v in meta.items():
        flat += [k, v]
    return flat


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
    side's (core/webhooks.py), here only its shape."""
    if url is None:
        return
    if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")) or len(url) > 2000:
        raise QueueError("the callback URL must be an http:// or https:// URL of at most 2000 characters")
    meta["callback_url"] = check_text(url, "the callback URL")
    if signer:
        meta["callback_signer"] = signer


__all__ = ["QueueClient", "QueueError", "Submission", "GROUP", "QueueKeys", "RequestKeys", "TERMINAL", "parse_status"]
