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
from .reporter import Reporter

from .upkeep import PARK_IDLE_MS, Upkeep

log = logging.getLogger("queueadmin.worker")

CONFIG_TTL = 2.0  # seconds a queue's settings are cached; admin changes apply this fast
TICK_INTERVAL = 0.5  # seconds between upkeep passes (promote, reap, unpark)
IDLE_WAIT = 1.0  # seconds an idle worker blocks on the wake list; short, to notice shutdown
BATCH_WINDOW = 0.005  # seconds of work claimed per round trip (see batch_size)
MAX_BATCH = 32


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
                 on_finish_many: Callable[[list[dict]], None] | None = None, report_in_background: bool = False,
                 install_signals: bool = True):
        self.client, self.queues, self.processors = client, list(queues), processors
        self.redis, self.keys, self.scripts = client.redis, client.keys, client.scripts
        self.burst, self.install_signals = burst, install_signals
        self.reporter = Reporter(client, on_finish, on_finish_many, background=report_in_background)
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.id = f"{self.host}:{self.pid}:{os.urandom(2).hex()}"
        self.name = name or self.id
        self.aging_ms = int(aging_seconds * 1000) if aging_seconds else 0
        self.registry = Registry(client.redis, client.keys, heartbeat=heartbeat, dead_after=dead_after)
        self.upkeep = Upkeep(client, self.registry, by=f"worker {self.id}", aging_ms=self.aging_ms)
        self.current: Item | None = None
        self.processed = self.failed = 0
        self._stop = threading.Event()
        self._closing = threading.Event()  # set at teardown; ends the lease keeper
        self._signals = 0
        self._configs: dict[str, tuple[float, QueueConfig]] = {}
        self._next_tick = 0.0
        self._reconnect_delay = 0.0
        # acknowledgements and token releases wait here for the next dispatch round trip
        self._acks: dict[str, tuple[str, list]] = {}  # request id -> (queue, flat outcome fields)
        self._releases: dict[str, list] = {q: [] for q in self.queues}  # queue -> token, mode, until
        self._done: dict[str, list[int]] = {}  # queue -> [done, failed] since the last flush
        self._finishing: dict[str, tuple[str, str]] = {}  # finished request -> (queue, de-dup key), to retire
        self._held: list[Item] = []  # the current batch, until its outcomes reach Redis
        self._live_workers = 1  # for a fair share of tokens per claim; refreshed by upkeep
        self._renewed = 0.0  # when the batch's leases were last renewed (monotonic)
        self._avg: dict[str, float] = {}  # queue -> moving average of an item's run time (s)

    # -- lifecycle ------------------------------------------------------------

    def work(self) -> int:
        """Run until stopped (or, in burst mode, until nothing is left). Returns 0."""
        self._bootstrap()
        reason = "stopped by signal"
        try:
            while not self._stop.is_set():
                try:
                    batch = self._next_batch()
                    if batch:
                        self._run_batch(batch)
                        self._reconnect_delay = 0.0
                        self._upkeep()  # between batches, never between a wake-up and its work
                        continue
                    self._upkeep()
                    if self.burst and self.upkeep.drained(self.queues):
                        reason = "burst: nothing left to do"
                        break
                    self._wait_for_work()
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
                    self.upkeep.recover(wid)
                self._live_workers = max(1, self.registry.live_count())
                break
            except RETRYABLE as exc:
                self._backoff(exc)
                if self._stop.is_set():
                    return
        self.registry.start_heartbeat(self.id, self._snapshot)
        threading.Thread(target=self._keep_leases, name=f"leases-{self.id}", daemon=True).start()
        log.info("worker %s serving %s", self.id, ",".join(self.queues))

    def _teardown(self) -> None:
        while self._acks or self._finishing or any(self._releases.values()):
            try:
                self._flush()
            except RETRYABLE as exc:
                if self._signals > 1:
                    break  # abandoned: leases bring the items back
                self._backoff(exc)
        self._closing.set()
        self.reporter.close()
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

    def batch_size(self, queue: str) -> int:
        """Tokens to claim at once: as many items as run in BATCH_WINDOW, so fast
        handlers share round trips while slow ones take one token at a time."""
        avg = self._avg.get(queue)
        if avg is None:
            return 1
        return max(1, min(MAX_BATCH, int(BATCH_WINDOW / max(avg, 1e-6))))

    def _next_batch(self) -> list[Item]:
        """Claim tokens (queues in order) until some yield items; [] when idle."""
        for queue in self.queues:
            for _ in range(20):
                tokens = self._cycle(queue, self.batch_size(queue))
                if not tokens:
                    break
                items = self._take(queue, tokens)
                if items:
                    return items
        if self._finishing or any(self._releases.values()):
            self._flush()  # retire what just finished before going idle
        return []

    def _cycle(self, queue: str, want: int) -> list[str]:
        """One round trip: retire finished requests, pending acknowledgements,
        every queue's token releases, throughput counts, and a claim of up to
        `want` tokens."""
        pipe = self.redis.pipeline(transaction=False)
        retiring = list(self._finishing.items())
        for rid, (q, dedup) in retiring:
            qk = self.keys.queue(q)
            self.scripts.pipe(pipe, "retire", [qk.tokens, qk.reqs, qk.held, qk.leases, qk.parked, qk.dedup, qk.sched,
                                               qk.index, qk.lastserved], [rid, dedup])
        acked = list(self._acks.items())
        for rid, (q, fields) in acked:
            cfg = self.config(q)
            self.scripts.pipe(pipe, "ack", self.keys.request(rid).all(),
                              [self.id, cfg.retention_ms, self.client.channel, *fields])
        cycled = [q for q in self.queues if q == queue or self._releases[q]]
        for q in cycled:
            qk = self.keys.queue(q)
            releases = self._releases[q]
            self.scripts.pipe(pipe, "cycle", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked, qk.wake,
                                              qk.config, qk.lastserved],
                              [self.id, self.config(q).lease_ms, want if q == queue else 0,
                               1 if self.aging_ms else 0, self._live_workers, *releases])
        minute = int(time.time() // 60)
        for q, (done, failed) in self._done.items():
            tp = self.keys.throughput(q, minute)
            pipe.hincrby(tp, "done", done)
            pipe.hincrby(tp, "failed", failed)
            pipe.expire(tp, 3600)
        answers = self.scripts.execute(pipe)[len(retiring):]
        self._acks, self._done, self._finishing = {}, {}, {}
        self._held = []
        for q in cycled:
            self._releases[q] = []
        for (rid, (q, _)), answer in zip(acked, answers):
            if int(answer[0]) == 1:
                self._finished(q, rid, answer[3])
        if retiring:
            self.reporter.put([rid for rid, _ in retiring])
        return answers[len(acked) + cycled.index(queue)] if queue in cycled else []

    def _flush(self) -> None:
        self._cycle(self.queues[0], 0)

    def _take(self, queue: str, tokens: list[str]) -> list[Item]:
        """Take one item per token (one script call per request); tokens left
        without an item are parked or dropped at the next round trip."""
        cfg = self.config(queue)
        by_rid: dict[str, list[str]] = {}
        for token in tokens:
            by_rid.setdefault(token.rpartition("#")[0], []).append(token)
        pipe = self.redis.pipeline(transaction=False)
        for rid, toks in by_rid.items():
            self.scripts.pipe(pipe, "take", self.keys.request(rid).all(),
                              [self.id, cfg.lease_ms, cfg.max_attempts, cfg.retention_ms, self.client.channel,
                               len(toks)])
        order = {t: i for i, t in enumerate(tokens)}
        items, releases = [], self._releases[queue]
        for (rid, toks), got in zip(by_rid.items(), self.scripts.execute(pipe)):
            if isinstance(got, int):  # NOT_FOUND: created a moment ago elsewhere, or long gone
                later = int(time.time() * 1000) + 1000
                for t in toks:
                    releases += [t, "park", later]
                self.upkeep.retire_if_stale(queue, rid)
                continue
            kind, wake_at, processor, dedup, rest = int(got[0]), int(got[1]), got[2], got[3], got[4:]
            for n in range(0, len(rest), 4):
                token = toks[n // 4]
                items.append(Item(queue, token, rid, rest[n], int(rest[n + 1]), rest[n + 2], int(rest[n + 3]),
                                  processor))
            left = toks[len(rest) // 4:]
            if kind == 4:
                self._finished(queue, rid, dedup)
            for t in left:
                if kind == 2:  # in flight elsewhere or waiting to retry: come back then
                    releases += [t, "park", wake_at]
                elif kind == 3:  # streamed request waiting for items: `add` wakes it (or a
                    # minute passes, in case the producer died between adding and waking)
                    releases += [t, "park", int(time.time() * 1000) + PARK_IDLE_MS]
                else:
                    releases += [t, "drop", 0]
        items.sort(key=lambda item: order[item.token])  # claim order: priority, then round-robin
        return items

    def _wait_for_work(self) -> None:
        wake_keys = [self.keys.queue(q).wake for q in self.queues]
        timeout = max(0.01, min(IDLE_WAIT, self._next_tick - time.monotonic()))
        self.redis.blpop(wake_keys, timeout=timeout)

    # -- running --------------------------------------------------------------

    def _run_batch(self, items: list[Item]) -> None:
        self._held, self._renewed = list(items), time.monotonic()
        for n, item in enumerate(items):
            if self._signals > 1:
                self._abandon(items[n:])
                return
            self._execute(item)

    def _keep_leases(self) -> None:
        """Renew the leases of batch items not running right now (waiting their
        turn, or done but not yet acknowledged), so a long item does not make
        its batch-mates look lost. The running item's lease is left alone: a
        handler that hangs must still be redelivered."""
        while not self._closing.wait(0.1):
            held = self._held
            if not held:
                continue
            try:
                lease = self.config(held[0].queue).lease_seconds  # may read Redis
                if time.monotonic() - self._renewed < lease / 3:
                    continue
                current = self.current
                others = [item for item in held if item is not current]
                self._renewed = time.monotonic()
                if others:
                    self._extend(others, lease)
            except RETRYABLE:
                pass  # the main loop reports Redis trouble

    def _execute(self, item: Item) -> None:
        fn = None
        try:
            self.current = item
            item.started = time.time()
            fn, takes_ctx = self.processors.get(item.processor)
            payload = json.loads(item.payload)
            result = fn(payload, ItemContext(self, item)) if takes_ctx else fn(payload)
            outcome, status, detail = "done", "done", {"result": result}
        except Abandon:
            self.current = None
            self._abandon([item])
            return
        except Exception as exc:  # a handler's failure is data, not a crash
            detail = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=20)}
            outcome = "dead" if fn is None or item.attempt >= self.config(item.queue).max_attempts else "retry"
            status = "retrying" if outcome == "retry" else "failed"
        finally:
            self.current = None
        finished = time.time()
        took = finished - item.started
        avg = self._avg.get(item.queue)
        self._avg[item.queue] = took if avg is None else 0.8 * avg + 0.2 * took
        try:
            text = _record(status, detail, item.attempt, self.id, item.started, finished)
        except (TypeError, ValueError) as exc:  # the result is not JSON
            detail = {"result": None, "error": f"result is not JSON-serialisable: {exc}"}
            text = _record("failed", detail, item.attempt, self.id, item.started, finished)
            outcome = "dead"
        self._queue_ack(item, outcome, text)

    def _queue_ack(self, item: Item, outcome: str, record: str) -> None:
        """The outcome goes to Redis with the next dispatch round trip, along
        with the token's return."""
        retry_ms = int(self.config(item.queue).backoff(item.attempt) * 1000) if outcome == "retry" else 0
        self._acks.setdefault(item.rid, (item.queue, []))[1].extend(
            [item.entry, item.index, outcome, record, retry_ms])
        self._releases[item.queue] += [item.token, "return", 0]
        counts = self._done.setdefault(item.queue, [0, 0])
        counts[0 if outcome == "done" else 1] += 1
        if outcome == "done":
            self.processed += 1
        else:
            self.failed += 1

    def _abandon(self, items: list[Item]) -> None:
        """Second signal: make held items due again now and give their tokens back."""
        try:
            pipe = self.redis.pipeline(transaction=False)
            for item in items:
                rk = self.keys.request(item.rid)
                self.scripts.pipe(pipe, "requeue", [rk.items, rk.leases], ["ids", item.entry])
                self._releases[item.queue] += [item.token, "return", 0]
            self.scripts.execute(pipe)
            log.info("worker %s abandoned %d held item(s)", self.id, len(items))
        except RETRYABLE:
            pass  # their leases bring them back

    def extend_lease(self, item: Item, seconds: float) -> bool:
        return self._extend([item], seconds)[0]

    def _extend(self, items: list[Item], seconds: float) -> list[bool]:
        """Push the leases of held items (and their tokens) `seconds` from now."""
        ms = int(seconds * 1000)
        pipe = self.redis.pipeline(transaction=False)
        for item in items:
            qk, rk = self.keys.queue(item.queue), self.keys.request(item.rid)
            self.scripts.pipe(pipe, "extend_item", [rk.items, rk.leases], [item.entry, self.id, ms])
            self.scripts.pipe(pipe, "extend_token", [qk.held, qk.leases], [item.token, self.id, ms])
        answers = self.scripts.execute(pipe)
        return [a == 1 and b == 1 for a, b in zip(answers[::2], answers[1::2])]

    def _finished(self, queue: str, rid: str, dedup_key: str) -> None:
        """A request closed: it is retired from its queue in the next round trip."""
        self._finishing[rid] = (queue, dedup_key)

    # -- upkeep ---------------------------------------------------------------

    def _upkeep(self) -> None:
        now = time.monotonic()
        if now < self._next_tick:
            return
        self._next_tick = now + TICK_INTERVAL
        for queue in self.queues:
            self.upkeep.tick(queue)
        self.upkeep.recover_dead()
        self._live_workers = max(1, self.registry.live_count())

    def _snapshot(self) -> dict:
        item = self.current
        current = [{"request": item.rid, "entry": item.entry, "index": item.index,
                    "started": item.started}] if item else []
        return {"current": json.dumps(current), "processed": self.processed, "failed": self.failed}


def _record(status: str, detail: dict, attempts: int, worker: str, started: float, finished: float) -> str:
    """An item's result record as JSON text (built directly: this runs per item)."""
    body = encode(detail)[1:-1]
    return (f'{{"status":"{status}",{body},"attempts":{attempts},"worker":{encode(worker)},'
            f'"started_at":{started:.6f},"finished_at":{finished:.6f}}}')


__all__ = ["Worker", "ItemContext", "Item", "redis"]
