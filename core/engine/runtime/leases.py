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

from queueadmin.core.engine.store.connection import RETRYABLE

log = logging.getLogger("queueadmin.worker")

CHECK_INTERVAL = 0.1


class LeaseKeeper:
    def __init__(self, worker):
        self.worker = worker

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"leases-{self.worker.id}", daemon=True).start()

    def _run(self) -> None:
        while not self.worker.closing.wait(CHECK_INTERVAL):
            try:
                self.renew_due()
            except RETRYABLE:
                pass  # the dispatcher reports Redis trouble; the leases tell others if it lasts
            except Exception:
                log.exception("worker %s: lease renewal failed", self.worker.id)

    def renew_due(self) -> None:
        now = time.monotonic()
        due, lease_of = [], {}
        for item in self.worker.held_items():
            if item.queue not in lease_of:
                lease_of[item.queue] = self.worker.config(item.queue).lease_seconds
            if now - item.renewed >= lease_of[item.queue] / 3:
                due.append(item)
        if not due:
            return
        for item, ok in zip(due, self.worker.extend_many(due, [lease_of[i.queue] for i in due])):
            item.renewed = now
            if not ok and self.worker.holds(item) and not item.lease_lost:
                # let it finish: its acknowledgement counts only if no one else's did (ack-5.lua);
                # stopping it would lose the work when the lease only looks lost (a failover)
                item.lease_lost = True
                log.warning("worker %s: the lease of %s#%s is no longer this worker's (it stalled, or Redis "
                            "failed over); its outcome counts only if no other worker's does",
                            self.worker.id, item.rid, item.index)
