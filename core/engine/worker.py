"""The worker: claim a token, take one item of its request, run it, record the
outcome, give the token back. Shaped like RQ's `work()`: bootstrap, signal
handlers, then a loop {stop? -> claim with a short timeout -> execute ->
upkeep}, with teardown in `finally`.

Signals: the first SIGTERM/SIGINT stops taking work and finishes what is held;
a second one abandons held items at once (they become due again right away).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import redis

from .client import QueueClient, encode
from .config import QueueConfig
from .connection import RETRYABLE
from .processors import Processors
from .registry import Registry
from .scripts import Code, ScriptError

log = logging.getLogger("queueadmin.worker")

PARK_FOREVER_MS = 2**52  # parked until new items arrive (an explicit unpark)
CONFIG_TTL = 2.0  # seconds a queue's settings are cached; admin changes apply this fast
TICK_INTERVAL = 0.5  # seconds between upkeep passes (promote, reap, unpark)
IDLE_WAIT = 1.0  # seconds an idle worker blocks on the wake list; short, to notice shutdown


class Abandon(BaseException):
    """Raised inside a running handler by a second stop signal."""


@dataclass
class Item:
    queue: str
    token: str
    rid: str
    entry: str
    index: int
    payload: str
    attempt: int
    processor: str
    started: float = field(default_factory=time.time)


class ItemContext:
    """What a processor may use: its attempt number and a lease extension."""

    def __init__(self, worker: "Worker", item: Item):
        self._worker, self.item = worker, item
        self.attempt, self.request_id, self.index = item.attempt, item.rid, item.index

    def extend_lease(self, seconds: float) -> bool:
        return self._worker.extend_lease(self.item, seconds)


class Worker:
    def __init__(self, client: QueueClient, queues: list[str], processors: Processors, *, name: str = "",
                 burst: bool = False, heartbeat: float = 1.0, dead_after: float = 10.0,
                 aging_seconds: float | None = None, on_finish: Callable[[dict], None] | None = None,
                 install_signals: bool = True):
        self.client, self.queues, self.processors = client, list(queues), processors
        self.redis, self.keys, self.scripts = client.redis, client.keys, client.scripts
        self.burst, self.on_finish, self.install_signals = burst, on_finish, install_signals
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.id = f"{self.host}:{self.pid}:{os.urandom(2).hex()}"
        self.name = name or self.id
        self.aging_ms = int(aging_seconds * 1000) if aging_seconds else 0
        self.registry = Registry(client.redis, client.keys, heartbeat=heartbeat, dead_after=dead_after)
        self.current: Item | None = None
        self.processed = self.failed = 0
        self._stop = threading.Event()
        self._signals = 0
        self._configs: dict[str, tuple[float, QueueConfig]] = {}
        self._next_tick = 0.0
        self._reconnect_delay = 0.0

    # -- lifecycle ------------------------------------------------------------

    def work(self) -> int:
        """Run until stopped (or, in burst mode, until nothing is left). Returns 0."""
        self._bootstrap()
        reason = "stopped by signal"
        try:
            while not self._stop.is_set():
                try:
                    self._upkeep()
                    item = self._next_item()
                    if item is None:
                        if self.burst and self._drained():
                            reason = "burst: nothing left to do"
                            break
                        self._wait_for_work()
                        continue
                    self._execute(item)
                    self._reconnect_delay = 0.0
                except RETRYABLE as exc:
                    self._backoff(exc)
        finally:
            self._teardown()
            log.info("worker %s exiting: %s", self.id, reason)
        return 0

    def stop(self) -> None:
        self._stop.set()

    def _bootstrap(self) -> None:
        if self.install_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        while True:
            try:
                self.registry.register(self.id, self.name, self.host, self.pid, self.queues)
                # a restart on this host releases what a dead former worker held
                for wid in self.registry.dead_on_host(self.host):
                    self.recover(wid)
                break
            except RETRYABLE as exc:
                self._backoff(exc)
                if self._stop.is_set():
                    return
        self.registry.start_heartbeat(self.id, self._snapshot)
        log.info("worker %s serving %s", self.id, ",".join(self.queues))

    def _teardown(self) -> None:
        self.registry.stop_heartbeat()
        try:
            self.registry.unregister(self.id)
        except RETRYABLE:
            log.warning("worker %s could not unregister: redis unavailable", self.id)

    def _on_signal(self, signum, frame) -> None:
        self._signals += 1
        self._stop.set()
        if self._signals == 1:
            log.info("worker %s: %s, finishing held work (again to abandon it)", self.id, signal.Signals(signum).name)
        elif self.current is not None:
            raise Abandon()

    def _backoff(self, exc: Exception) -> None:
        self._reconnect_delay = min(5.0, max(0.1, self._reconnect_delay * 2))
        log.warning("worker %s: redis unavailable (%s); retrying in %.1fs", self.id, exc, self._reconnect_delay)
        self._stop.wait(self._reconnect_delay)

    # -- claiming -------------------------------------------------------------

    def config(self, queue: str) -> QueueConfig:
        now = time.monotonic()
        cached = self._configs.get(queue)
        if cached is None or now - cached[0] > CONFIG_TTL:
            cached = (now, self.client.queue_config(queue))
            self._configs[queue] = cached
        return cached[1]

    def _next_item(self) -> Item | None:
        """Claim tokens until one yields an item; None when no queue has work."""
        for queue in self.queues:
            for _ in range(50):
                token = self._claim(queue)
                if token is None:
                    break
                item = self._take(queue, token)
                if item is not None:
                    return item
        return None

    def _claim(self, queue: str) -> str | None:
        qk = self.keys.queue(queue)
        got = self.scripts("claim", [qk.tokens, qk.reqs, qk.held, qk.leases, qk.wake, qk.config, qk.lastserved],
                           [self.id, self.config(queue).lease_ms])
        return got[0] if got else None

    def _take(self, queue: str, token: str) -> Item | None:
        rid = token.rpartition("#")[0]
        cfg = self.config(queue)
        try:
            got = self.scripts("take", self.keys.request(rid).all(),
                               [self.id, cfg.lease_ms, cfg.max_attempts, cfg.retention_ms, self.client.channel])
        except ScriptError as exc:
            if exc.code is not Code.NOT_FOUND:
                raise
            got = [5]
        kind = int(got[0])
        if kind == 1:
            return Item(queue, token, rid, got[1], int(got[2]), got[3], int(got[4]), got[5])
        if kind == 2:  # in flight elsewhere or waiting to retry: come back then
            self._release(queue, token, "park", int(got[1]))
        elif kind == 3:  # streamed request waiting for items
            self._release(queue, token, "park", PARK_FOREVER_MS)
        elif kind == 4:  # finished
            self._release(queue, token, "drop")
            self._finished(queue, rid)
        else:  # no such request: created a moment ago elsewhere, or long gone
            self._release(queue, token, "park", int(time.time() * 1000) + 1000)
            self._retire_if_stale(queue, rid)
        return None

    def _release(self, queue: str, token: str, mode: str, until: int = 0, pipe=None) -> None:
        qk = self.keys.queue(queue)
        keys = [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked, qk.wake]
        if pipe is not None:
            self.scripts.pipe(pipe, "release", keys, [token, self.id, mode, until])
            return
        try:
            self.scripts("release", keys, [token, self.id, mode, until])
        except ScriptError as exc:
            if exc.code is not Code.NOT_HELD:
                raise

    def _wait_for_work(self) -> None:
        wake_keys = [self.keys.queue(q).wake for q in self.queues]
        timeout = max(0.01, min(IDLE_WAIT, self._next_tick - time.monotonic()))
        self.redis.blpop(wake_keys, timeout=timeout)

    def _drained(self) -> bool:
        """Burst mode: no token waiting, held, or parked until a time (items in
        flight or retrying), and no scheduled request due within a second.
        Streamed requests waiting for items do not count as work."""
        now_ms = time.time() * 1000
        pipe = self.redis.pipeline(transaction=False)
        for q in self.queues:
            if self.config(q).paused:
                continue  # a paused queue has nothing to do until resumed
            qk = self.keys.queue(q)
            pipe.zcard(qk.tokens)
            pipe.hlen(qk.held)
            pipe.zcount(qk.parked, "-inf", PARK_FOREVER_MS - 1)
            pipe.zcount(qk.sched, "-inf", now_ms + 1000)
        return not any(pipe.execute())

    # -- running --------------------------------------------------------------

    def _execute(self, item: Item) -> None:
        self.current = item
        item.started = time.time()
        fn = None
        try:
            fn, takes_ctx = self.processors.get(item.processor)
            payload = json.loads(item.payload)
            result = fn(payload, ItemContext(self, item)) if takes_ctx else fn(payload)
            record = {"status": "done", "result": result}
            outcome = "done"
        except Abandon:
            self._abandon(item)
            return
        except Exception as exc:  # a handler's failure is data, not a crash
            record = {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                      "traceback": traceback.format_exc(limit=20)}
            outcome = "dead" if fn is None or item.attempt >= self.config(item.queue).max_attempts else "retry"
            if outcome == "retry":
                record["status"] = "retrying"
        finally:
            self.current = None
        record.update(attempts=item.attempt, worker=self.id, started_at=round(item.started, 6),
                      finished_at=round(time.time(), 6))
        try:
            text = encode(record)
        except (TypeError, ValueError) as exc:  # the result is not JSON
            text = encode({**record, "status": "failed", "result": None,
                           "error": f"result is not JSON-serialisable: {exc}"})
            outcome = "dead"
        self._record(item, outcome, text)

    def _record(self, item: Item, outcome: str, record: str) -> None:
        """Acknowledge and give the token back in one round trip; retried until
        Redis answers so that a finished item is never run again needlessly."""
        cfg = self.config(item.queue)
        retry_ms = int(cfg.backoff(item.attempt) * 1000)
        minute = int(time.time() // 60)
        tp = self.keys.throughput(item.queue, minute)
        delay = 0.1
        while True:
            try:
                pipe = self.redis.pipeline(transaction=False)
                self.scripts.pipe(pipe, "ack", self.keys.request(item.rid).all(),
                                  [item.entry, item.index, self.id, outcome, record, retry_ms, cfg.retention_ms,
                                   self.client.channel])
                self._release(item.queue, item.token, "return", pipe=pipe)
                pipe.hincrby(tp, "done" if outcome == "done" else "failed", 1)
                pipe.expire(tp, 3600)
                ack, _, _, _ = pipe.execute(raise_on_error=False)
                break
            except RETRYABLE as exc:
                if self._signals > 1:
                    return  # abandoned: the lease brings the item back
                log.warning("worker %s: cannot record item (%s); retrying in %.1fs", self.id, exc, delay)
                time.sleep(delay)
                delay = min(5.0, delay * 2)
        if outcome == "done":
            self.processed += 1
        else:
            self.failed += 1
        if isinstance(ack, list) and int(ack[0]) == 1:
            self._finished(item.queue, item.rid)

    def _abandon(self, item: Item) -> None:
        """Second signal: make the item due again now and give the token back."""
        rk = self.keys.request(item.rid)
        try:
            self.scripts("requeue", [rk.items, rk.leases], ["ids", item.entry])
            self._release(item.queue, item.token, "return")
            log.info("worker %s abandoned item %s/%s", self.id, item.rid, item.index)
        except RETRYABLE:
            pass  # its lease brings it back

    def extend_lease(self, item: Item, seconds: float) -> bool:
        ms = int(seconds * 1000)
        qk, rk = self.keys.queue(item.queue), self.keys.request(item.rid)
        try:
            self.scripts("extend_item", [rk.items, rk.leases], [item.entry, self.id, ms])
            self.scripts("extend_token", [qk.held, qk.leases], [item.token, self.id, ms])
            return True
        except ScriptError:
            return False

    def _finished(self, queue: str, rid: str) -> None:
        meta = self.redis.hgetall(self.keys.request(rid).meta)
        self.client._retire(queue, rid, meta.get("dedup_key", ""))
        if self.on_finish and meta:
            status = self.client.status(rid)
            if status:
                try:
                    self.on_finish(status)
                except Exception:  # history is best effort; the queue must go on
                    log.exception("worker %s: on_finish failed for %s", self.id, rid)

    def _retire_if_stale(self, queue: str, rid: str) -> None:
        created = self.redis.zscore(self.keys.queue(queue).index, rid)
        if created is None or time.time() * 1000 - created > 60_000:
            self.client._retire(queue, rid, "")

    # -- upkeep ---------------------------------------------------------------

    def _upkeep(self) -> None:
        now = time.monotonic()
        if now < self._next_tick:
            return
        self._next_tick = now + TICK_INTERVAL
        for queue in self.queues:
            self.tick(queue)
        for wid in self.registry.find_dead():
            self.recover(wid)

    def tick(self, queue: str) -> list[str]:
        qk = self.keys.queue(queue)
        promoted, *_ = self.scripts("tick", [qk.sched, qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked,
                                             qk.wake, qk.lastserved], [500, self.aging_ms])
        if promoted:
            pipe = self.redis.pipeline(transaction=False)
            for rid in promoted:
                self.scripts.pipe(pipe, "promoted", [self.keys.request(rid).meta], [])
            pipe.execute()
        return promoted

    def recover(self, wid: str) -> int:
        """Give back a dead worker's tokens and make its items due now."""
        if not self.registry.claim_recovery(wid):
            return 0  # another worker is on it
        n = 0
        for queue in self.registry.queues_of(wid) or self.client.queues():
            qk = self.keys.queue(queue)
            rids = self.scripts("release_worker", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked,
                                                   qk.wake], [wid])
            for rid in rids:
                rk = self.keys.request(rid)
                n += self.scripts("requeue", [rk.items, rk.leases], ["worker", wid])
                self.client._unpark(queue, rid)
        self.registry.mark_dead(wid)
        log.warning("worker %s recovered dead worker %s: %d item(s) due again", self.id, wid, n)
        return n

    def _snapshot(self) -> dict:
        item = self.current
        current = [{"request": item.rid, "entry": item.entry, "index": item.index,
                    "started": item.started}] if item else []
        return {"current": json.dumps(current), "processed": self.processed, "failed": self.failed}


__all__ = ["Worker", "ItemContext", "Item", "redis"]
