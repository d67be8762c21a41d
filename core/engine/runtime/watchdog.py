"""The watchdog: stops running items that must stop, and has the process
replaced when one will not.

* Time limits: an item running past its limit is interrupted (an exception
  in its thread, or its task cancelled) and recorded as a failed attempt.
* Stop requests: cancelling a request, or an operator's "stop" on one item,
  adds an entry to the `stops` sorted set (see `QueueClient.stop_item`); the
  watchdog reads the recent entries about once a second while items run.
* An item that does not stop within the grace (a thread blocked in C code,
  a task that swallows its cancellation or blocks the event loop) is
  reported as stopped at once, and the worker is told to replace its
  process: threads cannot be killed, so only a fresh process frees the slot.
"""
from __future__ import annotations

import logging
import threading
import time

from queueadmin.core.engine.store.connection import RETRYABLE
from queueadmin.core.engine.runtime.item import RUNNING

log = logging.getLogger("queueadmin.worker")

CHECK_INTERVAL = 0.1  # seconds between looks at the running items
STOPS_INTERVAL = 1.0  # seconds between reads of the stop requests (only while items run)
STOPS_WINDOW_MS = 120_000  # stop requests older than this are ignored (and pruned by writers)


class Watchdog:
    def __init__(self, worker, executor, grace: float):
        self.worker, self.executor, self.grace = worker, executor, grace
        self._seen: set[str] = set()
        self._next_stops = 0.0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"watchdog-{self.worker.id}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self.worker.closing.wait(CHECK_INTERVAL):
            try:
                self.check()
            except RETRYABLE:
                pass  # the dispatcher reports Redis trouble
            except Exception:  # the watchdog must outlive any surprise
                log.exception("worker %s: watchdog check failed", self.worker.id)

    def check(self) -> None:
        running = self.executor.running()
        now, mono = time.time(), time.monotonic()
        for item in running:
            if item.stop_reason is None and item.over_limit(now):
                log.warning("worker %s: item %s#%s ran past its time limit of %gs; stopping it",
                            self.worker.id, item.rid, item.index, item.limit)
                self.executor.interrupt(item, "time limit")
            elif item.stop_reason and item.state == RUNNING and mono - item.stop_at > self.grace:
                ran = self.executor.give_up(item)
                if ran is None:
                    continue
                why = f"item {item.rid}#{item.index} did not stop within {self.grace:g}s ({item.stop_reason})"
                if item.thread_id == self.worker.dispatcher_thread:
                    self.worker.emergency(ran, why)  # the dispatcher itself is stuck in it
                else:
                    self.worker.outcomes.on_done([ran])
                    self.worker.replace(why)
        if running and mono >= self._next_stops:
            self._next_stops = mono + STOPS_INTERVAL
            self._read_stops(running)

    def _read_stops(self, running) -> None:
        """Interrupt running items whose request was cancelled or that an
        operator stopped."""
        since = int(time.time() * 1000) - STOPS_WINDOW_MS
        wanted = {}
        for member in self.worker.redis.zrangebyscore(self.worker.keys.stops, since, "+inf"):
            if member not in self._seen:
                rid, _, entry = member.partition(" ")
                wanted[(rid, entry)] = member
        for item in running:
            member = wanted.get((item.rid, item.entry)) or wanted.get((item.rid, ""))
            if member is None:
                continue
            one_item = bool(member.partition(" ")[2])
            if one_item:
                self._seen.add(member)  # a later redelivery of the item runs normally
            reason = "stopped" if one_item else "cancelled"
            if self.executor.interrupt(item, reason):
                log.info("worker %s: stopping item %s#%s (%s)", self.worker.id, item.rid, item.index, reason)
        if len(self._seen) > 10_000:
            self._seen.clear()
