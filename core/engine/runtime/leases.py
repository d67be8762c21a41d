"""The lease keeper: while a worker lives and reaches Redis, it renews the
leases of every item it holds (running, waiting for a thread, or finished
and not yet acknowledged), a third of a lease before they run out.

So an item longer than its lease is never handed to a second worker while
the first one lives; the lease only bounds how soon a dead, frozen or
cut-off worker's items come back (a frozen keeper renews nothing). Hung
handlers are the time limits' business (see watchdog.py), not the lease's.
An item whose lease was taken over meanwhile (the worker was frozen past it)
runs to its end: its acknowledgement counts only if no other worker's did.
"""
from __future__ import annotations

import logging
import threading
import time

from queueadmin.core.engine.hooks import HOOKS
from queueadmin.core.engine.runtime.item import Held, Item
from queueadmin.core.engine.runtime.pace import Pace
from queueadmin.core.engine.store import Store
from queueadmin.core.engine.store.connection import RETRYABLE

log = logging.getLogger("queueadmin.worker")

CHECK_INTERVAL = 0.1


class LeaseKeeper:
    def __init__(self, store: Store, held: Held, pace: Pace, worker_id: str, closing: threading.Event):
        self.store, self.held, self.pace, self.id, self.closing = store, held, pace, worker_id, closing

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"leases-{self.id}", daemon=True).start()

    def _run(self) -> None:
        while not self.closing.wait(CHECK_INTERVAL):
            try:
                self.renew_due()
            except RETRYABLE:
                pass  # the dispatcher reports Redis trouble; the leases tell others if it lasts
            except Exception:
                log.exception("worker %s: lease renewal failed", self.id)

    def extend(self, items: list[Item], seconds: list[float]) -> list[bool]:
        """Push the leases of held items (and their tokens) `seconds` from
        now, in one round trip; False for an item this worker no longer holds."""
        trip = self.store.trip()
        answers = []
        for item, s in zip(items, seconds):
            ms = int(s * 1000)
            answers.append((self.store.request.extend_item(item.rid, item.entry, self.id, ms, trip=trip),
                            self.store.queue.extend_token(item.queue, item.token, self.id, ms, trip=trip)))
        trip.run()
        return [entry.value and token.value for entry, token in answers]

    def renew_due(self) -> None:
        now = time.monotonic()
        due, lease_of = [], {}
        for item in self.held.items():
            if item.queue not in lease_of:
                lease_of[item.queue] = self.pace.config(item.queue).lease_seconds
            if now - item.renewed >= lease_of[item.queue] / 3:
                due.append(item)
        if not due:
            return
        for item, ok in zip(due, self.extend(due, [lease_of[i.queue] for i in due])):
            item.renewed = now
            if HOOKS.active:
                HOOKS.event(item, "lease renewed", {"held": ok, "lease_seconds": lease_of[item.queue]})
            if not ok and self.held.holds(item) and not item.lease_lost:
                # let it finish: its acknowledgement counts only if no one else's did (ack-5.lua);
                # stopping it would lose the work when the lease only looks lost (a failover)
                item.lease_lost = True
                log.warning("worker %s: the lease of %s#%s is no longer this worker's (it stalled, or Redis "
                            "failed over); its outcome counts only if no other worker's does",
                            self.id, item.rid, item.index)
