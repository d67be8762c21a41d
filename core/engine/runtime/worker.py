"""The worker: its dispatcher claims tokens, takes one item per token, hands
the items to its executor (threads for sync processors, an event loop for
async ones) and records their outcomes. Shaped like RQ's `work()`:
bootstrap, signal handlers, then a loop {stop? -> collect outcomes -> claim
what free slots can run -> wait}, with teardown in `finally`.

The worker is made of collaborators that own their state (see the class):
claims.py claims and takes work in round trips (cycle.py), outcomes.py
turns runs into acknowledgements, keeping.py holds tokens between round
trips, handoff.py and routing.py handle handoffs and work it cannot run;
the loop below only calls them. The dispatcher hands items to threads,
except a batch of fast items when nothing else runs, which it runs itself
(no hand-off). Beside it: the lease keeper (leases.py) renews the leases
of held items, the watchdog (watchdog.py) enforces time limits and stop
requests, the registry's heartbeat shows what runs.

Signals: the first SIGTERM/SIGINT stops taking work and finishes what is held;
a second one hands held items back at once (they become due again right away).
An operator's stop (asks.py) is a first signal; an operator's quiet stops
taking work and keeps the process alive.
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
from typing import Callable

import redis

from queueadmin.core.engine import errors
from queueadmin.core.engine.client.queue_client import QueueClient
from queueadmin.core.engine.runtime import itemlog
from queueadmin.core.engine.runtime.abilities import Abilities
from queueadmin.core.engine.runtime.asks import Asks
from queueadmin.core.engine.runtime.claims import Claims
from queueadmin.core.engine.runtime.executor import Executor
from queueadmin.core.engine.runtime.handoff import REST_MAX, Handoffs
from queueadmin.core.engine.runtime.item import Held, Item, ItemContext, Ran
from queueadmin.core.engine.runtime.keeping import Keeping
from queueadmin.core.engine.runtime.leases import LeaseKeeper
from queueadmin.core.engine.runtime.outcomes import Outcomes, rss_mb
from queueadmin.core.engine.runtime.pace import Pace
from queueadmin.core.engine.runtime.pool import RECYCLE  # exit code: replace this process (pool.py)
from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.registry import Registry
from queueadmin.core.engine.runtime.reporter import Reporter
from queueadmin.core.engine.runtime.routing import Routing
from queueadmin.core.engine.runtime.upkeep import Upkeep
from queueadmin.core.engine.runtime.watchdog import Watchdog
from queueadmin.core.engine.store.connection import RETRYABLE

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


class Worker:
    """A worker process's dispatcher and the collaborators it is made of,
    each owning its state: `pace` (each queue's settings and item pace),
    `held` (the items it holds), `keeping` (its tokens between round trips),
    `outcomes` (finished runs until Redis has them), `routing` (what it
    cannot run), `handoffs` (one-item requests handed to it at rest) and
    `claims` (the round trips that claim and take work), beside its
    `executor`, `leases` keeper, `watchdog`, `registry`, `upkeep`,
    `reporter` and `asks` (what operators ask of it: quiet, stop; its
    process title)."""

    def __init__(self, client: QueueClient, queues: list[str], processors: Processors, *, name: str = "",
                 burst: bool = False, heartbeat: float = 1.0, dead_after: float = 10.0,
                 aging_seconds: float | None = None, on_finish: Callable[[dict], None] | None = None,
                 on_finish_many: Callable[[list[dict]], None] | None = None, report_in_background: bool = False,
                 install_signals: bool = True, threads: int = 16, async_tasks: int = 100,
                 time_limit_grace: float = 5.0, max_items: int = 0, max_memory_mb: float = 0,
                 recycled: int = 0, exit_now: Callable[[int], None] | None = None,
                 on_serving: Callable[[], None] | None = None):
        self.client, self.queues, self.processors = client, list(queues), processors
        self._on_serving = on_serving  # called once, after the first claim: work that may wait until then
        self.redis, self.keys, self.store = client.redis, client.keys, client.store
        self.burst, self.install_signals = burst, install_signals
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.id = f"{self.host}:{self.pid}:{os.urandom(2).hex()}"
        self.name = name or f"{self.host}:{self.pid}"  # the name every page shows (queries/workers.py)
        self.aging_ms = int(aging_seconds * 1000) if aging_seconds else 0
        self.max_items, self.max_memory_mb, self.recycled = max_items, max_memory_mb, recycled
        self.exit_now = exit_now  # ends the process from another thread (see emergency)
        self.dispatcher_thread = 0
        self.closing = threading.Event()  # set at teardown; ends the helper threads
        self._stop = threading.Event()
        self._wakeup = threading.Event()  # an item finished
        self._signals = 0
        self._leaving: str | None = None  # why this process stops taking work (replace, recycle)
        self._leave_by = 0.0
        self._exit_code = 0
        self._next_tick = 0.0
        self._reconnect_delay = 0.0
        self._wake_keys = {self.keys.queue(q).wake: q for q in self.queues}

        self.reporter = Reporter(client, on_finish, on_finish_many, background=report_in_background)
        self.registry = Registry(client.redis, client.keys, heartbeat=heartbeat, dead_after=dead_after)
        self.upkeep = Upkeep(client, self.registry, by=f"worker {self.id}", aging_ms=self.aging_ms)
        self.abilities = Abilities(processors)  # what this process can run (routing.py)
        self.pace = Pace(client, self.id)
        self.held = Held()
        self.keeping = Keeping(self.store, self.pace, self.queues)
        self.outcomes = Outcomes(self.store, self.pace, self.keeping, self.held, self.id, client.channel,
                                 self._wakeup)
        self.executor = Executor(processors, lambda item: ItemContext(self, item), self.outcomes.on_done,
                                 threads=threads, tasks=async_tasks, name=self.id)
        self.routing = Routing(client, self.abilities, self.registry, self.pace, self.keeping, self.held,
                               self.outcomes.on_done, self.id, self.queues)
        self.handoffs = Handoffs(self.store, self.pace, self.id)
        self.claims = Claims(self.store, self.pace, self.executor, self.keeping, self.outcomes, self.routing,
                             self.handoffs, self.held, self.abilities, self.upkeep, self.reporter, self.id,
                             self.queues, aging=bool(self.aging_ms))
        self.leases = LeaseKeeper(self.store, self.held, self.pace, self.id, self.closing)
        self.watchdog = Watchdog(self, self.executor, grace=time_limit_grace)
        self.asks = Asks(self, busy_poll=BUSY_POLL, idle_wait=IDLE_WAIT)  # quiet, stop, the title (asks.py)

    @property
    def processed(self) -> int:
        return self.outcomes.processed

    @property
    def failed(self) -> int:
        return self.outcomes.failed

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
                    if self.asks.resting():
                        self.asks.rest()
                        continue
                    if self._stop.is_set() or self._leaving:
                        if self._wind_down():
                            reason = self._leaving or reason
                            break
                        continue
                    claimed = self.claims.claim_and_start()
                    self._serving()
                    if claimed:
                        self._reconnect_delay = 0.0
                        self.chores()  # between batches too (at most every TICK_INTERVAL), never before one
                        continue
                    self.chores()
                    if self.burst and not self.executor.busy() and not self.outcomes.runs \
                            and self.upkeep.drained(self.queues, self.routing.passes()):
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

    def _serving(self) -> None:
        if self._on_serving is not None:
            on, self._on_serving = self._on_serving, None
            on()

    def stop(self) -> None:
        self._stop.set()
        self.keeping.close()
        self._wakeup.set()

    def stopping(self) -> bool:
        """Leaving: stopped (a signal, an operator) or being replaced."""
        return self._stop.is_set() or bool(self._leaving)

    def exit_with(self, code: int) -> None:
        self._exit_code = code

    def wake(self) -> None:
        self._wakeup.set()

    def sleep(self, seconds: float) -> None:
        """Wait until an item finishes or `seconds` pass."""
        self._wakeup.wait(seconds)
        self._wakeup.clear()

    def replace(self, why: str) -> None:
        """Stop taking work; finish or hand back what is held; exit RECYCLE."""
        if not self._leaving:
            log.warning("worker %s: replacing this process: %s", self.id, why)
            self._leaving, self._exit_code = why, RECYCLE
            self._leave_by = time.monotonic() + self.watchdog.grace
            self.keeping.close()
        self._wakeup.set()

    def emergency(self, ran: Ran, why: str) -> None:
        """The dispatcher is stuck inside a fast item it ran itself (blocked in C
        past its time limit and the grace): from the watchdog's thread, record
        that item as stopped, hand back the rest, and end the process at once
        (`exit_now`), since the stuck thread cannot be ended."""
        log.error("worker %s: replacing this process now: %s", self.id, why)
        self._leaving, self._exit_code = why, RECYCLE
        self.keeping.close()
        self.outcomes.on_done([ran])
        if self.exit_now is None:
            return  # in-process (tests): the loop ends once the item returns
        try:
            self._collect()
            self.outcomes.abandon([i for i in self.held.items() if i not in self.outcomes.acked and i is not ran.item])
            self.claims.flush()
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
                self.routing.publish_can()  # handoffs may come once it rests
                # a restart on this host releases what a dead former worker held
                for wid in self.registry.dead_on_host(self.host):
                    self.upkeep.recover(wid)
                self.claims.live_workers = max(1, self.registry.live_count())
                break
            except redis.RedisError as exc:
                if not transient(exc):
                    raise
                self._backoff(exc)
                if self._stop.is_set():
                    return
        itemlog.install()
        self.registry.start_heartbeat(self.id, self._snapshot, self.asks.on_beat)
        self.asks.on_beat("")  # the title at once
        self.leases.start()
        self.watchdog.start()
        log.info("worker %s serving %s (%d threads, %d async tasks)", self.id, ",".join(self.queues),
                 self.executor.threads, self.executor.tasks)

    def _wind_down(self) -> bool:
        """Leaving: True once nothing is held any more. A second signal, or a
        replacement whose grace ran out, hands back what still runs."""
        hand_back = self._signals > 1 or (self._leaving and time.monotonic() > self._leave_by)
        if hand_back and self.executor.busy():
            self.outcomes.abandon([i for i in self.held.items() if i not in self.outcomes.acked])
            return True
        if not self.executor.busy() and not self.outcomes.runs:
            return True
        if self.outcomes.acks:
            self.claims.flush()
        self._wakeup.wait(0.1)
        self._wakeup.clear()
        return False

    def _teardown(self) -> None:
        self._collect()
        self.hand_back()
        while self.claims.pending():
            try:
                self.claims.flush()
            except redis.RedisError as exc:
                if self._signals > 1 or not transient(exc):
                    break  # abandoned: leases bring the items back
                self._backoff(exc)
        self.closing.set()
        self.executor.close()
        self.reporter.close()
        self.registry.stop_heartbeat()
        try:
            self.routing.unpublish_can()
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
        timeout = max(0.005, min(IDLE_WAIT, self._next_tick - now, *(t - now for t in self.claims.throttled_until()),
                                 *(t - now for t in self.routing.wake_by(now))))
        self._wakeup.clear()
        if self.outcomes.runs:
            return
        awake = self.routing.awake(now)  # not the queues where only work it cannot run waits (routing.py)
        if self.executor.busy() or not awake:
            self._wakeup.wait(min(timeout, BUSY_POLL) if awake else timeout)
        else:
            self.handoffs.rest(awake)  # one-item requests may come as handoffs (handoff.py)
            woke = self.redis.blpop([self.keys.queue(q).wake for q in awake], timeout=min(timeout, REST_MAX))
            if not woke:
                return
            if woke[1].startswith("["):
                self.handoffs.popped(self._wake_keys[woke[0]], woke[1])
            elif self.keys.in_queue_slot(woke[1]):  # a one-item request's id: a hint (claims.py)
                self.claims.hint(self._wake_keys[woke[0]], woke[1])

    def _collect(self) -> None:
        """Finished runs become acknowledgements for the next round trip; the
        process's limits are looked at after items finish, so every process
        makes progress."""
        if not self.outcomes.collect():
            return
        if self.max_items and self.processed + self.failed >= self.max_items:
            self.replace(f"reached --max-items-per-process {self.max_items}")
        elif self.max_memory_mb and rss_mb() > self.max_memory_mb:
            self.replace(f"memory above --max-memory-per-process {self.max_memory_mb:g} MB")

    def hand_back(self) -> None:
        """Leaving: stop resting, and hand back the handoffs held."""
        try:
            self.handoffs.leave()
            items = [i for group in self.claims.handed_items().values() for i in group]
            if items:
                self.outcomes.abandon(items)
        except redis.RedisError:
            pass  # their leases bring them back

    # -- leases ---------------------------------------------------------------

    def extend_lease(self, item: Item, seconds: float) -> bool:
        """An item's lease (and its token's) `seconds` from now (ItemContext.extend_lease)."""
        return self.leases.extend([item], [seconds])[0]

    # -- upkeep ---------------------------------------------------------------

    def chores(self, review: bool = True) -> None:
        """The shared upkeep (upkeep.py), at most every TICK_INTERVAL; `review`:
        also say what this worker can run (routing.py)."""
        now = time.monotonic()
        if now < self._next_tick:
            return
        self._next_tick = now + TICK_INTERVAL
        for queue in self.queues:
            self.upkeep.tick(queue)
        self.upkeep.periodic()
        self.upkeep.sweep_chains()
        self.upkeep.recover_dead()
        self.claims.live_workers = max(1, self.registry.live_count())
        if review:
            self.routing.review()  # at most every REVIEW_EVERY (routing.py)

    def _snapshot(self) -> dict:
        running = self.executor.running()
        current = [{"request": i.rid, "entry": i.entry, "index": i.index, "started": i.started,
                    "limit": i.limit, "kind": i.kind, "progress": i.progress, "note": i.note} for i in running]
        threads_busy = sum(1 for i in running if i.kind == "thread")
        return {"current": json.dumps(current), "processed": self.processed, "failed": self.failed,
                "threads": self.executor.threads, "threads_busy": threads_busy,
                "tasks": self.executor.tasks, "tasks_busy": len(running) - threads_busy,
                "recycled": self.recycled, "state": self.asks.state(), **self.abilities.registry_fields()}


__all__ = ["Worker", "ItemContext", "Item", "RECYCLE", "transient"]
