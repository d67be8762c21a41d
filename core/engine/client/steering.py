"""Steering live requests: cancel, stop an item, change priority or
concurrency, requeue in-flight items, retry or discard dead letters, run a
scheduled request now. A mixin of `QueueClient` (client.py), which owns the
connection, keys, scripts and the queue and submission helpers it uses.
"""
from __future__ import annotations

import time

import redis

from queueadmin.core.engine import events
from queueadmin.core.engine.features import schedule
from queueadmin.core.engine.config import MAX_CONCURRENCY
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.client.limits import encode
from queueadmin.core.engine.client.reads import TERMINAL
from queueadmin.core.engine.store.scripts import Code, ScriptError


class Steering:
    def cancel(self, rid: str) -> None:
        meta = self._meta_or_raise(rid)
        config = self.queue_config(meta["queue"])
        try:
            self.scripts("cancel", self.keys.request(rid).all(), [config.retention_ms, self.channel])
        except ScriptError as exc:
            raise QueueError(refusal(rid, exc.code)) from exc
        self._retire(meta["queue"], rid, meta.get("dedup_key", ""))
        self._ask_stop(rid)  # its running items stop too (watchdog.py)
        events.fire(events.CANCELLED, events.Cancelled(self, rid, meta))  # chains, webhooks (events.py)

    def stop_item(self, rid: str, entry: str) -> bool:
        """Ask the worker running item `entry` to stop it: the attempt is
        recorded as failed ("stopped by an operator") and follows the retry
        policy. False when the item is not in flight."""
        self._meta_or_raise(rid)
        try:
            item = self.item(rid, entry)  # a stream's entry or a lean request's item (reads.py)
        except redis.ResponseError:  # not a stream id
            raise QueueError(f"unknown item {entry!r} of request {rid}") from None
        if not item or not item["consumer"]:
            return False
        self._ask_stop(rid, entry)
        return True

    def _ask_stop(self, rid: str, entry: str = "") -> None:
        now = int(time.time() * 1000)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(self.keys.stops, {f"{rid} {entry}".strip(): now})
        pipe.zremrangebyscore(self.keys.stops, "-inf", now - 600_000)
        pipe.execute()

    def set_priority(self, rid: str, priority: int) -> None:
        if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 99:
            raise QueueError("priority must be an integer between 0 and 99")
        self._adjust(rid, "priority", priority)

    def set_concurrency(self, rid: str, concurrency: int) -> None:
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or not 1 <= concurrency <= MAX_CONCURRENCY:
            raise QueueError(f"concurrency must be an integer between 1 and {MAX_CONCURRENCY}")
        self._adjust(rid, "concurrency", concurrency)

    def _adjust(self, rid: str, field: str, value: int) -> None:
        meta = self._meta_or_raise(rid)
        if meta.get("state") in TERMINAL:
            raise QueueError(f"request {rid} is {meta['state']}: nothing left to change")
        qk = self.keys.queue(meta["queue"])
        args = [rid, value, ""] if field == "priority" else [rid, "", value]
        try:
            self.scripts("adjust", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.parked, qk.wake], args)
        except ScriptError as exc:
            raise QueueError(refusal(rid, exc.code)) from exc
        self.redis.hset(self.keys.request(rid).meta, field, value)
        status = self.status(rid)
        if status and self.channel:  # open pages show the change at once
            self.redis.publish(self.channel, encode({
                "type": "progress", "t": int(time.time() * 1000),
                **{f: status[f] for f in ("id", "queue", "state", "total", "done", "failed", "expired",
                                          "priority", "concurrency")}}))

    def requeue(self, rid: str, entry_ids: list[str] | None = None) -> int:
        """Make in-flight items of a request due now (all of them when no ids)."""
        meta = self._meta_or_raise(rid)
        rk = self.keys.request(rid)
        ids = entry_ids if entry_ids is not None else [e for e, _ in self.redis.zrange(rk.leases, 0, -1, withscores=True)]
        if not ids:
            return 0
        n = self.scripts("requeue", [rk.items, rk.leases], ["ids", *ids])
        self._unpark(meta["queue"], rid)
        return n

    def retry_dead(self, rid: str, entry_ids: list[str] | None = None) -> int:
        """Send dead-lettered items back to run again; reopens a failed request."""
        meta = self._meta_or_raise(rid)
        try:
            n, reopened = self.scripts("retry", self.keys.request(rid).all(), [self.channel, *(entry_ids or [])])
        except ScriptError as exc:
            raise QueueError(refusal(rid, exc.code)) from exc
        if reopened:
            pipe = self.redis.pipeline(transaction=False)
            self._enqueue(pipe, meta["queue"], rid, int(meta["priority"]), int(meta["concurrency"]), "", 0, n)
            self.scripts.execute(pipe)
        elif n:
            self._unpark(meta["queue"], rid)
        return n

    def discard_dead(self, rid: str, entry_ids: list[str] | None = None) -> int:
        """Drop dead letters for good (all of the request's when no ids)."""
        try:
            return self.scripts("discard", self.keys.request(rid).all(), list(entry_ids or []))
        except ScriptError as exc:
            raise QueueError(refusal(rid, exc.code)) from exc

    def run_now(self, queue: str, rid: str) -> bool:
        """Make a scheduled request due now; False if it is not scheduled."""
        qk = self.keys.queue(queue)
        if not self.redis.zadd(qk.sched, {rid: 0}, xx=True, ch=True) and self.redis.zscore(qk.sched, rid) is None:
            if not schedule.run_now(self, queue, rid):  # far off: in a schedule shard
                return False
        self.redis.rpush(qk.wake, 1)  # an idle worker wakes, ticks and promotes it
        return True

    def _unpark(self, queue: str, rid: str) -> None:
        qk = self.keys.queue(queue)
        try:
            self.scripts("unpark", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.parked, qk.wake], [rid])
        except ScriptError:
            pass  # not registered: finished meanwhile, nothing to wake

    def _retire(self, queue: str, rid: str, dedup_key: str) -> None:
        qk = self.keys.queue(queue)
        self.scripts("retire", [qk.tokens, qk.reqs, qk.held, qk.leases, qk.parked, qk.dedup, qk.sched,
                                qk.index, qk.lastserved, qk.rate], [rid, dedup_key or ""])


def refusal(rid: str, code: Code) -> str:
    return {
        Code.NOT_FOUND: f"unknown request {rid!r}",
        Code.FINISHED: f"request {rid} is already finished",
        Code.FINALIZED: f"request {rid} is finalized: no more items can be added",
        Code.NOT_HELD: f"request {rid}: not held",
        Code.EXISTS: f"request {rid} exists already",
    }[code]
