"""The producer and operator API of the queue engine: `QueueClient`.

One object made of collaborators that own their parts: `submission`
(submission.py: submit, stream-submit), `reads` (reads.py: status, results,
items, dead letters, figures) and `steering` (steering.py: cancel, stop an
item, priority, concurrency, requeue, retry, discard, run now), all over one
`store` (the Redis client, its keys and a typed call per Lua script). The
client itself keeps its queues (definition, settings, pause), and its
public methods hand each call to the collaborator that owns it. No Django
in here.
"""
from __future__ import annotations

import time
from typing import Any, Iterable, Iterator

from queueadmin.core.engine.client.dedup import INTERNAL
from queueadmin.core.engine.client.reads import TERMINAL, Reads, parse_status
from queueadmin.core.engine.client.steering import Steering
from queueadmin.core.engine.client.submission import Submission, Submitter, new_request_id
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features import groups
from queueadmin.core.engine.store import Store
from queueadmin.core.engine.store.keys import GROUP, QueueKeys, RequestKeys


class QueueClient:
    def __init__(self, redis, prefix: str = "qa", processors: Iterable[str] | None = None,
                 channel: str | None = None):
        self.store = Store(redis, prefix)
        self.redis, self.keys, self.scripts = redis, self.store.keys, self.store.scripts
        self.channel = self.keys.events_all if channel is None else channel
        self._configs: dict[str, tuple[float, QueueConfig]] = {}  # so a submission is one round trip
        self.reads = Reads(self.store, self.queue_config)
        self.submission = Submitter(self, self.store, self.reads, self.queue_config,
                                    set(processors) if processors is not None else None, self.channel)
        self.steering = Steering(self, self.store, self.reads, self.submission, self.channel)

    @property
    def processors(self) -> set[str] | None:
        """The processors submissions may name (None: any); the submission's to check."""
        return self.submission.processors

    @processors.setter
    def processors(self, names: set[str] | None) -> None:
        self.submission.processors = names

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

    def set_group_limits(self, queue: str, group: str, concurrency: int | None = None,
                         rate_limit: str | None = None) -> None:
        """A group's own limits in `queue` (None: the queue's default,
        group_concurrency / group_rate_limit): at most `concurrency` of its
        items in flight (0: no limit), at most `rate_limit` starts per
        window (features/groups.py)."""
        groups.set_limits(self, queue, group, concurrency, rate_limit)

    def clear_group_limits(self, queue: str, group: str) -> None:
        """Back to the queue's defaults for `group`."""
        groups.clear_limits(self, queue, group)

    def group_stats(self, queue: str) -> list[dict]:
        """The queue's groups: in flight, limits, waiting, throttled (features/groups.py)."""
        return groups.stats(self, queue)

    # -- submission (submission.py) ---------------------------------------------

    def submit(self, queue: str, processor: str, items: Iterable[Any], *, priority: int | None = None,
               concurrency: int | None = None, delay: float = 0, expires_in: float | None = None,
               dedup_key: str | None = None, dedup: bool = True, time_limit: float | None = None,
               callback_url: str | None = None, callback_signer: str = "", then: dict | None = None,
               rate_limit: str | None = None, request_id: str | None = None,
               parent: str | None = None, dedup_scope: str = INTERNAL, group: str | None = None) -> Submission:
        """Submit a request of items. A duplicate of a pending or running request
        (same de-dup key; by default a hash of processor and items) returns it,
        within `dedup_scope` (whose submissions may be its duplicates: a user's).
        `time_limit` (seconds, 0 = none) overrides the queue's per-item limit.
        `callback_url`: POST the summary there when it finishes (core/webhooks/).
        `then`: the request that follows this one (core/engine/features/chains.py).
        `rate_limit` (`20/s`, `600/min`, ...): at most that many of its items
        start in any such window, across all workers (ratelimit.py).
        `request_id` and `parent` are for follow-ups: a fixed id, and its parent.
        `group` (a tenant, 1-64 characters): its items count against the
        group's limits and take fair turns with other groups (features/groups.py)."""
        return self.submission.submit(
            queue, processor, items, priority=priority, concurrency=concurrency, delay=delay, expires_in=expires_in,
            dedup_key=dedup_key, dedup=dedup, time_limit=time_limit, callback_url=callback_url,
            callback_signer=callback_signer, then=then, rate_limit=rate_limit, request_id=request_id, parent=parent,
            dedup_scope=dedup_scope, group=group)

    def begin(self, queue: str, processor: str, *, priority: int | None = None, concurrency: int | None = None,
              delay: float = 0, expires_in: float | None = None, dedup_key: str | None = None,
              time_limit: float | None = None, callback_url: str | None = None,
              callback_signer: str = "", rate_limit: str | None = None,
              dedup_scope: str = INTERNAL, group: str | None = None) -> Submission:
        """Open a streamed request: add items with `add`, then `finalize`.
        De-duplication applies only with an explicit key (items are unknown yet)."""
        return self.submission.begin(
            queue, processor, priority=priority, concurrency=concurrency, delay=delay, expires_in=expires_in,
            dedup_key=dedup_key, time_limit=time_limit, callback_url=callback_url, callback_signer=callback_signer,
            rate_limit=rate_limit, dedup_scope=dedup_scope, group=group)

    def add(self, rid: str, items: Iterable[Any], finalize: bool = False) -> int:
        """Add items to a streamed request; returns its total so far."""
        return self.submission.add(rid, items, finalize)

    def finalize(self, rid: str) -> int:
        return self.submission.add(rid, [], finalize=True)

    # -- reading (reads.py) ---------------------------------------------------------

    def status(self, rid: str) -> dict | None:
        """The request's state and counts, or None if Redis no longer has it."""
        return self.reads.status(rid)

    def statuses(self, rids: list[str]) -> list[dict | None]:
        return self.reads.statuses(rids)

    def finished_statuses(self, rids: list[str]) -> list[dict]:
        return self.reads.finished_statuses(rids)

    def results(self, rid: str, batch: int = 1000) -> Iterator[dict]:
        """One record per item, ordered by index."""
        return self.reads.results(rid, batch)

    def items(self, rid: str, start: int = 0, count: int = 50) -> list[dict]:
        """A page of items with their payload, state and result (for dashboards)."""
        return self.reads.items(rid, start, count)

    def item(self, rid: str, entry: str) -> dict | None:
        """One item: {index, payload (JSON text), consumer ("" when not held), deliveries, idle_ms}."""
        return self.reads.item(rid, entry)

    def items_at(self, entries: list[tuple[str, str]]) -> list[dict | None]:
        """Items by (request id, entry id), as `item` gives them, in one round trip."""
        return self.reads.items_at(entries)

    def holders(self, rids: list[str]) -> list[list[dict]]:
        """For each request, the workers holding its items ([{name, pending}]), in one round trip."""
        return self.reads.holders(rids)

    def lean_item(self, rid: str) -> dict | None:
        return self.reads.lean_item(rid)

    def dead_letters(self, rid: str) -> list[dict]:
        return self.reads.dead_letters(rid)

    def live_requests(self, queue: str) -> dict[str, dict]:
        """Registered requests of a queue: id -> {priority, concurrency, scheduled}."""
        return self.reads.live_requests(queue)

    def queue_stats(self, queue: str) -> dict:
        """Depth by priority (items not yet started), in flight, scheduled, dead letters."""
        return self.reads.queue_stats(queue)

    # -- steering (steering.py) -----------------------------------------------------

    def cancel(self, rid: str) -> None:
        self.steering.cancel(rid)

    def stop_item(self, rid: str, entry: str) -> bool:
        """Ask the worker running item `entry` to stop it; False when it is not in flight."""
        return self.steering.stop_item(rid, entry)

    def set_priority(self, rid: str, priority: int) -> None:
        self.steering.set_priority(rid, priority)

    def set_concurrency(self, rid: str, concurrency: int) -> None:
        self.steering.set_concurrency(rid, concurrency)

    def requeue(self, rid: str, entry_ids: list[str] | None = None) -> int:
        """Make in-flight items of a request due now (all of them when no ids)."""
        return self.steering.requeue(rid, entry_ids)

    def retry_dead(self, rid: str, entry_ids: list[str] | None = None) -> int:
        """Send dead-lettered items back to run again; reopens a failed request."""
        return self.steering.retry_dead(rid, entry_ids)

    def discard_dead(self, rid: str, entry_ids: list[str] | None = None) -> int:
        """Drop dead letters for good (all of the request's when no ids)."""
        return self.steering.discard_dead(rid, entry_ids)

    def run_now(self, queue: str, rid: str) -> bool:
        """Make a scheduled request due now; False if it is not scheduled."""
        return self.steering.run_now(queue, rid)


__all__ = ["QueueClient", "QueueError", "Submission", "GROUP", "QueueKeys", "RequestKeys", "TERMINAL", "parse_status",
           "new_request_id"]
