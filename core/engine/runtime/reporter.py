"""Announcing finished requests on a background thread, in batches, so that
a slow subscriber never delays the worker's next item: the engine's FINISHED
event (events.py: chains, and in a worker process run through Django the
history and webhooks), then the worker's own callbacks (`on_finish`,
`on_finish_many`), if it was given any."""
from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

from queueadmin.core.engine import events

log = logging.getLogger("queueadmin.worker")

_CLOSE = object()


class Reporter:
    def __init__(self, client, on_finish: Callable[[dict], None] | None = None,
                 on_finish_many: Callable[[list[dict]], None] | None = None, background: bool = False,
                 batch: int = 500):
        self.client, self.on_finish, self.on_finish_many = client, on_finish, on_finish_many
        self.batch = batch
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="reporter", daemon=True) if background else None
        if self._thread:
            self._thread.start()

    @property
    def wanted(self) -> bool:
        return bool(self.on_finish or self.on_finish_many)

    def put(self, rids: list[str]) -> None:
        if self._thread:
            for rid in rids:
                self._queue.put(rid)
        else:
            self._report(rids)

    def close(self, timeout: float = 10.0) -> None:
        """Report what is still queued, then stop."""
        if self._thread:
            self._queue.put(_CLOSE)
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            rids, closing = [self._queue.get()], False
            while len(rids) < self.batch:
                try:
                    rids.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if _CLOSE in rids:
                rids, closing = [r for r in rids if r is not _CLOSE], True
            if rids:
                self._report(rids)
            if closing:
                return

    def _report(self, rids: list[str]) -> None:
        finished = events.Finished(self.client, rids)
        try:
            events.fire(events.FINISHED, finished)  # chained requests get their follow-ups first (events.py)
        except Exception:  # the upkeep's sweeps catch up (chains, webhooks)
            log.exception("reporting %d finished request(s) failed", len(rids))
        if not self.wanted:
            return
        try:
            statuses = finished.statuses  # read once, for the subscribers and the callbacks
            if self.on_finish_many:
                self.on_finish_many(statuses)
            for st in statuses if self.on_finish else ():
                self.on_finish(st)
        except Exception:  # history is best effort; the queue must go on
            log.exception("recording %d finished request(s) failed", len(rids))
