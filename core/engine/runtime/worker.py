"""The worker: its dispatcher claims tokens, takes one item per token, hands
the items to its executor (threads for sync processors, an event loop for
async ones) and records their outcomes. Shaped like RQ's `work()`:
bootstrap, signal handlers, then a loop {stop? -> collect outcomes -> claim
what free slots can run -> wait}, with teardown in `finally`.

Claiming is in claims.py, outcomes in outcomes.py (mixins of Worker). The
dispatcher hands items to threads, except a batch of fast items when nothing
else runs, which it runs itself (no hand-off). Beside it: the lease
keeper (leases.py) renews the leases of held items, the watchdog
(watchdog.py) enforces time limits and stop requests, the registry's
heartbeat shows what runs.

Signals: the first SIGTERM/SIGINT stops taking work and finishes what is held;
a second one hands held items back at once (they become due again right away).
A process whose item would not stop, or that reached its item or memory
limit, stops taking work, finishes or hands back what it holds and exits
with RECYCLE, so that its pool starts a fresh one (see pool.py).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from collections import deque
from typing import Callable

import redis

from queueadmin.core.engine import errors
from queueadmin.core.engine.runtime import itemlog
from queueadmin.core.engine.runtime.abilities import Abilities
from queueadmin.core.engine.runtime.claims import Claiming
from queueadmin.core.engine.client.queue_client import QueueClient
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.store.connection import RETRYABLE
from queueadmin.core.engine.runtime.executor import Executor
from queueadmin.core.engine.runtime.item import Item, ItemContext, Ran
from queueadmin.core.engine.runtime.handoff import REST_MAX, Handoffs
from queueadmin.core.engine.runtime.keeping import Keeping
from queueadmin.core.engine.runtime.leases import LeaseKeeper
from queueadmin.core.engine.client.limits import encode
from queueadmin.core.engine.runtime.outcomes import Outcomes
from queueadmin.core.engine.runtime.pool import RECYCLE  # exit code: replace this process (pool.py)
from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.registry import Registry
from queueadmin.core.engine.runtime.reporter import Reporter
from queueadmin.core.engine.runtime.routing import Routing
from queueadmin.core.engine.runtime.upkeep import Upkeep
from queueadmin.core.engine.runtime.watchdog import Watchdog

log = logging.getLogger("queueadmin.worker")

TICK_INTERVAL = 0.5  # seconds between upkeep passes (promote, reap, unpark)
IDLE_WAIT = 1.0  # seconds an idle dispatcher blocks on the wake lists; short, to notice shutdown
BUSY_POLL = 0.05  # seconds between looks for new work while items run (an item's end ends the wait too)
ASYNC_PROCESSORS = True  # `async def` processors run on the executor's event loop (core.checks reads this)


def transient(exc: BaseException) -> bool:
    """Redis trouble a worker rides out (backing off, holding its outcomes):
    connection loss, timeouts, failover, loading, a full server (maxmemory
    with noeviction, also when a script's write is refused), a read-only
    replica. Anything else is a bug and ends the worker loudly."""
    return isinstance(exc, RETRYABLE) or errors.trouble(exc) is not None


class Worker(Claiming, Keeping, Handoffs, Routing, Outcomes):
    def __init__(self, client: QueueClient, queues: list[str], processors: Processors, *, name: str = "",
                 burst: bool = False, heartbeat: float = 1.0, dead_after: float = 10.0,
                 aging_seconds: float | None = None, on_finish: Callable[[dict], None] | None = None,
                 on_finish_many: Callable[[list[dict]], None] | None = None, report_in_background: bool = False,
                 install_signals: bool = True, threads: int = 16, async_tasks: int = 100,
                 time_limit_grace: float = 5.0, max_items: int = 0, max_memory_mb: float = 0,
                 recycled: int = 0, exit_now: Callable[[int], None] | None = None):
        self.client, self.queues, self.processors = client, list(queues), processors
        self.abilities = Abilities(processors)  # what this process can run (routing.py)
        self.redis, self.keys, self.scripts = client.redis, client.keys, client.scripts
        self.burst, self.install_signals = burst, install_signals
        self.reporter = Reporter(client, on_finish, on_finish_many, background=report_in_background)
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.id = f"{self.host}:{self.pid}:{os.urandom(2).hex()}"
        self.name = name or self.id
        self._id_json = encode(self.id)
        self.aging_ms = int(aging_seconds * 1000) if aging_seconds else 0
        self.max_items, self.max_memory_mb, self.recycled = max_items, max_memory_mb, recycled
        self.exit_now = exit_now  # ends the process from another thread (see emergency)
        self.dispatcher_thread = 0
        self.registry = Registry(client.redis, client.keys, heartbeat=heartbeat, dead_after=dead_after)
        self.upkeep = Upkeep(client, self.registry, by=f"worker {self.id}", aging_ms=self.aging_ms)
        self.executor = Executor(processors, lambda item: ItemContext(self, item), self.on_done,
                                 threads=threads, tasks=async_tasks, name=self.id)
        self.watchdog = Watchdog(self, self.executor, grace=time_limit_grace)
        self.processed = self.failed = 0
        self.closing = threading.Event()  # set at teardown; ends the helper threads
        self._stop = threading.Event()
        self._wakeup = threading.Event()  # an item finished
        self._signals = 0
        self._leaving: str | None = None  # why this process stops taking work (replace, recycle)
        self._exit_code = 0
        self._configs: dict[str, tuple[float, QueueConfig]] = {}
        self._next_tick = 0.0
        self._reconnect_delay = 0.0
        self._outcomes: deque[Ran] = deque()  # finished runs, from executor threads
        self._held: dict[str, Item] = {}  # token -> item, from take until its outcome reaches Redis
        # acknowledgements and token releases wait here for the next dispatch round trip
        self._acks: dict[str, tuple[str, list]] = {}  # request id -> (queue, flat outcome fields)
        self._acked: list[Item] = []  # items whose outcome is in _acks
        self._deferred: list[Item] = []  # of which one-item requests' items whose token waits for the answer
        self._wake_keys = {self.keys.queue(q).wake: q for q in self.queues}
        self._hints: dict[str, str] = {}  # queue -> a one-item request whose wake marker woke this worker
        self._resting: list[str] = []  # the queues it rests on: handoffs may come (handoff.py)
        self._handed: list[tuple[str, str, list]] = []  # (queue, request id, take answer) of handoffs held, to start
        self._lean_acks: list[int] = []  # requests per ack_lean call in the round trip being built (claims.py)
        self._releases: dict[str, list] = {q: [] for q in self.queues}  # queue -> token, mode, until
        self._kept: dict[str, list[Item]] = {}  # queue -> acknowledged items whose tokens are kept (keeping.py)
        self._capped: dict[str, float] = {}  # queue -> until when its claims need not be tried again (keeping.py)
        self._best_waiting: dict[str, int] = {}  # queue -> priority of its best waiting token (-1: none)
        self._claimed_at = time.monotonic()  # when the last claim's round trip came back
        self._done: dict[str, list[int]] = {}  # queue -> [done, failed] since the last flush
        self._stats: dict[str, dict] = {}  # queue -> figures for core.engine.stats since the last flush
        self._figures_due = 0.0  # when _done and _stats go out next (claims.py, FIGURES_EVERY)
        self._finishing: dict[str, tuple[str, str]] = {}  # finished request -> (queue, de-dup key), to retire
        self._live_workers = 1  # for a fair share of tokens per claim; refreshed by upkeep
        self._avg: dict[str, float] = {}  # queue -> moving average of an item's run time (s)
        self._throttled: dict[str, float] = {}  # queue -> when a rate limit that held back claims frees a start
        self._async_queue: dict[str, bool] = {}  # queue -> its last item's processor was async
        # items it cannot run (routing.py)
        self._untakes: dict[str, tuple[str, str, list]] = {}  # request id -> (queue, processor, entry/attempt pairs)
        self._expired: dict[str, frozenset[str]] = {}  # queue -> processors no live worker has had for too long
        self._muted: dict[str, float] = {}  # queue -> until when its wake markers are not waited on
        self._told: set[str] = set()  # processors whose lack was logged
        self._review_due = 0.0
        self._can_published = ""

    # -- lifecycle ------------------------------------------------------------

    def work(self) -> int:
        """Run until stopped (or, in burst mode, until nothing is left). Returns
        0, or RECYCLE when the process should be replaced."""
        self.dispatcher_thread = threading.get_ident()
        self._bootstrap()
        reason = "stopped by signal"
        try:
            while True:
                try:
                    self._collect()
                    if self._stop.is_set() or self._leaving:
                        if self._wind_down():
                            reason = self._leaving or reason
                            break
                        continue
                    if self._claim_and_start():
                        self._reconnect_delay = 0.0
                        self._upkeep()  # between batches too (at most every TICK_INTERVAL), never before one
                        continue
                    self._upkeep()
                    if self.burst and not self.executor.busy() and not self._outcomes \
                            and self.upkeep.drained(self.queues, self._passes()):
                        reason = "burst: nothing left to do"
                        break
                    self._wait()
                except redis.RedisError as exc:
                    if not transient(exc):
                        raise
                    self._backoff(exc)
        finally:
            self._teardown()
            log.info("worker %s exiting: %s", self.id, reason)
        return self._exit_code

    def stop(self) -> None:
        self._stop.set()
        self._wakeup.set()

    def replace(self, why: str) -> None:
        """Stop taking work; finish or hand back what is held; exit RECYCLE."""
        if not self._leaving:
            log.warning("worker %s: replacing this process: %s", self.id, why)
            self._leaving, self._exit_code = why, RECYCLE
            self._leave_by = time.monotonic() + self.watchdog.grace
        self._wakeup.set()

    def emergency(self, ran: Ran, why: str) -> None:
        """The dispatcher is stuck inside a fast item it ran itself (blocked in C
        past its time limit and the grace): from the watchdog's thread, record
        that item as stopped, hand back the rest, and end the process at once
        (`exit_now`), since the stuck thread cannot be ended."""
        log.error("worker %s: replacing this process now: %s", self.id, why)
        self._leaving, self._exit_code = why, RECYCLE
        self.on_done([ran])
        if self.exit_now is None:
            return  # in-process (tests): the loop ends once the item returns
        try:
            self._collect()
            self._abandon([i for i in self._held.values() if i not in self._acked and i is not ran.item])
            self._flush()
            self.registry.stop_heartbeat()
            self.registry.unregister(self.id)
        except redis.RedisError:
            pass  # leases and dead-worker recovery bring the rest back
        self.closing.set()
        self.reporter.close()
        self.exit_now(RECYCLE)

    def _bootstrap(self) -> None:
        if self.install_signals and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        while True:
            try:
                self.registry.register(self.id, self.name, self.host, self.pid, self.queues)
                self.registry.beat(self.id, self._snapshot())  # slots and recycling shown at once
                self._publish_can()  # handoffs may come once it rests
                # a restart on this host releases what a dead former worker held
                for wid in self.registry.dead_on_host(self.host):
                    self.upkeep.recover(wid)
                self._live_workers = max(1, self.registry.live_count())
                break
            except redis.RedisError as exc:
                if not transient(exc):
                    raise
                self._backoff(exc)
                if self._stop.is_set():
                    return
        itemlog.install()
        self.registry.start_heartbeat(self.id, self._snapshot)
        LeaseKeeper(self).start()
        self.watchdog.start()
        log.info("worker %s serving %s (%d threads, %d async tasks)", self.id, ",".join(self.queues),
                 self.executor.threads, self.executor.tasks)

    def _wind_down(self) -> bool:
        """Leaving: True once nothing is held any more. A second signal, or a
        replacement whose grace ran out, hands back what still runs."""
        hand_back = self._signals > 1 or (self._leaving and time.monotonic() > self._leave_by)
        if hand_back and self.executor.busy():
            self._abandon([i for i in self._held.values() if i not in self._acked])
            return True
        if not self.executor.busy() and not self._outcomes:
            return True
        if self._acks:
            self._flush()
        self._wakeup.wait(0.1)
        self._wakeup.clear()
        return False

    def _teardown(self) -> None:
        self._collect()
        self._hand_back()
        while self._acks or self._finishing or self._kept or any(self._releases.values()):
            try:
                self._flush()
            except redis.RedisError as exc:
                if self._signals > 1 or not transient(exc):
                    break  # abandoned: leases bring the items back
                self._backoff(exc)
        self.closing.set()
        self.executor.close()
        self.reporter.close()
        self.registry.stop_heartbeat()
        try:
            self._unpublish_can()
            self.registry.unregister(self.id)
        except redis.RedisError:
            log.warning("worker %s could not unregister: redis unavailable", self.id)

    def _on_signal(self, signum, frame) -> None:
        self._signals += 1
        self.stop()
        if self._signals == 1:
            log.info("worker %s: %s, finishing held work (again to hand it back)", self.id,
                     signal.Signals(signum).name)

    def _backoff(self, exc: Exception) -> None:
        self._reconnect_delay = min(5.0, max(0.1, self._reconnect_delay * 2))
        log.warning("worker %s: %s; retrying in %.1fs", self.id, errors.describe(exc), self._reconnect_delay)
        self._stop.wait(self._reconnect_delay)

    def _wait(self) -> None:
        """Nothing to claim: while items run, wait for one to finish (a local
        event, no round trip), looking for new work every BUSY_POLL; idle,
        block on the queues' wake lists."""
        now = time.monotonic()
        timeout = max(0.005, min(IDLE_WAIT, self._next_tick - now, *(t - now for t in self._throttled.values()),
                                 *(t - now for t in self._muted.values() if t > now)))
        self._wakeup.clear()
        if self._outcomes:
            return
        awake = self._awake(now)  # not the queues where only work it cannot run waits (routing.py)
        if self.executor.busy() or not awake:
            self._wakeup.wait(min(timeout, BUSY_POLL) if awake else timeout)
        else:
            self._rest(awake)  # one-item requests may come as handoffs (handoff.py)
            woke = self.redis.blpop([self.keys.queue(q).wake for q in awake], timeout=min(timeout, REST_MAX))
            if not woke:
                return
            if woke[1].startswith("["):
                self._popped(self._wake_keys[woke[0]], woke[1])
            elif self.keys.in_queue_slot(woke[1]):  # a one-item request's id: a hint (claims.py)
                self._hints[self._wake_keys[woke[0]]] = woke[1]

    # -- leases ---------------------------------------------------------------

    def held_items(self) -> list[Item]:
        return list(self._held.values())

    def holds(self, item: Item) -> bool:
        return self._held.get(item.token) is item

    def extend_lease(self, item: Item, seconds: float) -> bool:
        return self.extend_many([item], [seconds])[0]

    def extend_many(self, items: list[Item], seconds: list[float]) -> list[bool]:
        """Push the leases of held items (and their tokens) `seconds` from now."""
        pipe = self.redis.pipeline(transaction=False)
        for item, s in zip(items, seconds):
            ms = int(s * 1000)
            qk, rk = self.keys.queue(item.queue), self.keys.request(item.rid)
            self.scripts.pipe(pipe, "extend_item", [rk.items, rk.leases], [item.entry, self.id, ms])
            self.scripts.pipe(pipe, "extend_token", [qk.held, qk.leases], [item.token, self.id, ms])
        answers = self.scripts.execute(pipe)
        return [a == 1 and b == 1 for a, b in zip(answers[::2], answers[1::2])]

    # -- upkeep ---------------------------------------------------------------

    def _upkeep(self) -> None:
        now = time.monotonic()
        if now < self._next_tick:
            return
        self._next_tick = now + TICK_INTERVAL
        for queue in self.queues:
            self.upkeep.tick(queue)
        self.upkeep.periodic()
        self.upkeep.sweep_chains()
        self.upkeep.recover_dead()
        self._live_workers = max(1, self.registry.live_count())
        self._review()  # at most every REVIEW_EVERY (routing.py)

    def _snapshot(self) -> dict:
        running = self.executor.running()
        current = [{"request": i.rid, "entry": i.entry, "index": i.index, "started": i.started,
                    "limit": i.limit, "kind": i.kind, "progress": i.progress, "note": i.note} for i in running]
        threads_busy = sum(1 for i in running if i.kind == "thread")
        return {"current": json.dumps(current), "processed": self.processed, "failed": self.failed,
                "threads": self.executor.threads, "threads_busy": threads_busy,
                "tasks": self.executor.tasks, "tasks_busy": len(running) - threads_busy,
                "recycled": self.recycled, **self.abilities.registry_fields()}


__all__ = ["Worker", "ItemContext", "Item", "RECYCLE", "transient"]
