"""Run several worker processes and keep them running.

The parent has set up (Django, settings, processors) and holds no
connection and no thread; each child is forked from it, so a child starts
serving in milliseconds instead of importing and setting up again. A child
dies with its parent (PR_SET_PDEATHSIG), so killing the pool kills its
workers, as killing a single worker would.

A child that exits with RECYCLE (it reached its item or memory limit, or
had an item that would not stop) is replaced at once and counted; one that
dies unexpectedly is restarted after a short pause. On SIGTERM/SIGINT the
signal is passed on and the pool waits for the children to finish what they
hold (a second signal is passed on too, so they hand held work back at once).
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import time
import traceback
from typing import Callable

log = logging.getLogger("queueadmin.worker")

RECYCLE = 3  # a child's exit code asking to be replaced (the worker exits with it; core/launch.py re-executes)
STOPPED = 4  # a child stopped by an operator (client/workers.py): not replaced
PR_SET_PDEATHSIG = 1


class Pool:
    def __init__(self, run_child: Callable[[int, int], int], processes: int, burst: bool = False):
        """`run_child(slot, recycled)` runs one worker in a forked child and
        returns its exit code; `recycled` counts the slot's replacements."""
        self.run_child, self.size, self.burst = run_child, processes, burst
        self.children: dict[int, int] = {}  # pid -> slot
        self.recycled = [0] * processes
        self.stopping = 0

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for slot in range(self.size):
            self._spawn(slot)
        status = 0
        while self.children:
            try:
                pid, raw = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            slot = self.children.pop(pid, None)
            if slot is None:
                continue
            code = os.waitstatus_to_exitcode(raw)
            if code == RECYCLE and not self.stopping:
                self.recycled[slot] += 1
                log.info("worker process %s asked to be replaced; starting a fresh one (slot %s)", pid, slot)
                self._spawn(slot)
            elif code == STOPPED:
                log.info("worker process %s stopped by an operator (slot %s is left empty)", pid, slot)
            elif self.stopping or (self.burst and code == 0):
                if code > 0 and code != RECYCLE:  # a child ended by our own signal is a clean stop
                    status = status or code
            else:
                log.warning("worker process %s exited with %s; restarting it", pid, code)
                time.sleep(0.5)
                self._spawn(slot)
        return status

    def _spawn(self, slot: int) -> None:
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os._exit(self._child(slot, parent))
        self.children[pid] = slot
        log.info("started worker process %s (slot %s)", pid, slot)

    def _child(self, slot: int, parent: int) -> int:
        code = 1
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _die_with_parent()
            if os.getppid() != parent:  # the parent died before we asked
                return 1
            code = self.run_child(slot, self.recycled[slot])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:  # no logging.shutdown(): a thread may be configuring logging (Django's set-up)
            sys.stdout.flush()
            sys.stderr.flush()
        return code

    def _on_signal(self, signum, frame) -> None:
        self.stopping += 1
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGTERM if self.stopping == 1 else signal.SIGINT)
            except ProcessLookupError:
                pass


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: an orphaned child finishes on its own
