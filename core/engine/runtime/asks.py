"""What operators ask of a worker process (client/workers.py) and how the
process shows itself in ps: the `asks` collaborator of Worker (worker.py).

The heartbeat's thread hears the ask in the round trip it makes anyway
(registry.py) and calls `on_beat`:

* quiet: take nothing new, finish what is held, stay alive (the dispatcher
  then only `rest`s: it hands back tokens, handoffs and the `can` marks once,
  finishes what runs and keeps up the shared chores);
* stop: as a first SIGTERM, exiting STOPPED, which a pool does not replace.

Both only set flags and wake the dispatcher, as the signal handler does: the
dispatcher's thread does the work. The process title is set here too, so at
most once a heartbeat and only when its text changes.
"""
from __future__ import annotations

import logging

from queueadmin.core.engine.client.workers import QUIET, STOP
from queueadmin.core.engine.runtime.pool import STOPPED
from queueadmin.core.engine.runtime.title import Title, worker_text

log = logging.getLogger("queueadmin.worker")


class Asks:
    def __init__(self, worker, busy_poll: float, idle_wait: float):
        self.worker = worker
        self.busy_poll, self.idle_wait = busy_poll, idle_wait
        self.quiet = False  # asked to take nothing new; stays until the process ends
        self.handed_back = False  # once quiet: its tokens, handoffs and `can` marks went back
        self.title = Title()

    def on_beat(self, asked: str) -> bool:
        """After each heartbeat (its thread): do what was asked; show the
        title. True when the worker's state changed (the registry shows it)."""
        before = self.state()
        if asked == STOP or (asked == QUIET and self.worker.burst):  # quiet, a burst worker has nothing left
            self.stop()
        elif asked == QUIET:
            self.go_quiet()
        w = self.worker
        self.title.set(worker_text(w.name, w.queues, len(w.executor.running()), self.state()))
        return self.state() != before

    def go_quiet(self) -> None:
        """Take nothing new; finish what is held; stay alive (and visible as quiet)."""
        w = self.worker
        if not self.quiet:
            log.info("worker %s: quiet: taking nothing new, finishing held work", w.id)
            self.quiet = True
            w.keeping.close()
        w.wake()

    def stop(self) -> None:
        """An operator's stop: as a first SIGTERM, and the pool does not start
        another process in its place (STOPPED)."""
        w = self.worker
        if not w.stopping():
            log.info("worker %s: stop asked: finishing held work, then exiting", w.id)
            w.exit_with(STOPPED)
        w.stop()

    def state(self) -> str:
        """What the workers page shows beside busy or idle."""
        return "stopping" if self.worker.stopping() else "quiet" if self.quiet else ""

    def resting(self) -> bool:
        """Quiet, and not leaving: the dispatcher rests instead of claiming."""
        return self.quiet and not self.worker.stopping()

    def rest(self) -> None:
        """One turn of a quiet dispatcher: hand back once, then finish what
        runs (its acknowledgements go out) and keep up the shared chores."""
        w = self.worker
        if not self.handed_back:
            w.hand_back()
            w.routing.unpublish_can()  # no handoffs come to it (routing.py)
            self.handed_back = True
        if w.claims.pending():
            w.claims.flush()
        w.chores(review=False)  # a quiet worker no longer says what it can run
        w.sleep(self.busy_poll if w.executor.busy() else self.idle_wait)
