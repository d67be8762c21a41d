"""Steering live requests: cancel, stop an item, change priority or
concurrency, requeue in-flight items, retry or discard dead letters, run a
scheduled request now. The `steering` collaborator of QueueClient
(queue_client.py).
"""
from __future__ import annotations

import time

import redis

from queueadmin.core.engine import events
from queueadmin.core.engine.features import schedule
from queueadmin.core.engine.config import MAX_CONCURRENCY
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.client.limits import encode
from queueadmin.core.engine.client.reads import TERMINAL, Reads
from queueadmin.core.engine.client.submission import Submitter, refusal
from queueadmin.core.engine.store import Store
from queueadmin.core.engine.store.scripts import ScriptError


class Steering:
    def __init__(self, client, store: Store, reads: Reads, submitter: Submitter, channel: str):
        self.client = client  # the face events carry to their subscribers (events.Cancelled)
        self.store, self.redis, self.keys = store, store.redis, store.keys
        self.reads, self.submitter, self.channel = reads, submitter, channel

    def cancel(self, rid: str) -> None:
        meta = self.reads.meta(rid)
        config = self.reads.queue_config(meta["queue"])
        try:
            if self.keys.in_queue_slot(rid):  # one call: nothing can take it between cancel and retire
                self.store.queue.cancel_one(meta["queue"], rid, config.retention_ms, self.channel)
            else:
                self.store.request.cancel(rid, config.retention_ms, self.channel)
                self.store.queue.retire(meta["queue"], rid, meta.get("dedup_key", ""))
        except ScriptError as exc:
            raise QueueError(refusal(rid, exc.code)) from exc
        self._ask_stop(rid)  # its running items stop too (watchdog.py)
        events.fire(events.CANCELLED, events.Cancelled(self.client, rid, meta))  # chains, webhooks (events.py)

    def stop_item(self, rid: str, entry: str) -> bool:
        """Ask the worker running item `entry` to stop it: the attempt is
        recorded as failed ("stopped by an operator") and follows the retry
        policy. False when the item is not in flight."""
        self.reads.meta(rid)
        try:
            item = self.reads.item(rid, entry)  # a stream's entry or a lean request's item (reads.py)
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
        meta = self.reads.meta(rid)
        if meta.get("state") in TERMINAL:
            raise QueueError(f"request {rid} is {meta['state']}: nothing left to change")
        try:
            self.store.queue.adjust(meta["queue"], rid, **{field: value})
        except ScriptError as exc:
            raise QueueError(refusal(rid, exc.code)) from exc
        self._write_meta(rid, field, value)
        status = self.reads.status(rid)
        if status and self.channel:  # open pages show the change at once
            self.redis.publish(self.channel, encode({
                "type": "progress", "t": int(time.time() * 1000),
                **{f: status[f] for f in ("id", "queue", "state", "total", "done", "failed", "expired",
                                          "priority", "concurrency")}}))

    def _write_meta(self, rid: str, field: str, value: int) -> None:
        """The new value in the request's meta, unless the request finished
        and expired since the script ran: the HSET would make a meta of one
        field and no TTL, which is taken away again."""
        meta = self.keys.request(rid).meta
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(meta, field, value)
        pipe.hlen(meta)
        if pipe.execute()[1] == 1:
            self.redis.delete(meta)

    def requeue(self, rid: str, entry_ids: list[str] | None = None) -> int:
        """Make in-flight items of a request due now (all of them when no ids)."""
        meta = self.reads.meta(rid)
        rk = self.keys.request(rid)
        ids = entry_ids if entry_ids is not None else [e for e, _ in self.redis.zrange(rk.leases, 0, -1, withscores=True)]
        if not ids:
            return 0
        n = self.store.request.requeue(rid, ids)
        self.submitter.unpark(meta["queue"], rid)
        return n

    def retry_dead(self, rid: str, entry_ids: list[str] | None = None) -> int:
        """Send dead-lettered items back to run again; reopens a failed request."""
        meta = self.reads.meta(rid)
        try:
            n, reopened = self.store.request.retry(rid, self.channel, entry_ids)
        except ScriptError as exc:
            raise QueueError(refusal(rid, exc.code)) from exc
        if reopened:
            trip = self.store.trip()
            self.submitter.enqueue(trip, meta["queue"], rid, int(meta["priority"]), int(meta["concurrency"]), "", 0, n)
            trip.run()
        elif n:
            self.submitter.unpark(meta["queue"], rid)
        return n

    def discard_dead(self, rid: str, entry_ids: list[str] | None = None) -> int:
        """Drop dead letters for good (all of the request's when no ids)."""
        try:
            return self.store.request.discard(rid, entry_ids)
        except ScriptError as exc:
            raise QueueError(refusal(rid, exc.code)) from exc

    def run_now(self, queue: str, rid: str) -> bool:
        """Make a scheduled request due now; False if it is not scheduled."""
        qk = self.keys.queue(queue)
        if not self.redis.zadd(qk.sched, {rid: 0}, xx=True, ch=True) and self.redis.zscore(qk.sched, rid) is None:
            if not schedule.run_now(self.client, queue, rid):  # far off: in a schedule shard
                return False
        self.redis.rpush(qk.wake, 1)  # an idle worker wakes, ticks and promotes it
        return True
