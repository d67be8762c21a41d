"""Run several worker processes and keep them running.

Each child is a fresh interpreter running one worker (spawned, not forked,
so no Redis connection or Django state is shared). A child that dies
unexpectedly is restarted; on SIGTERM/SIGINT the signal is passed on and the
pool waits for the children to finish what they hold (a second signal is
passed on too, so they abandon held work at once).
"""
from __future__ import annotations

import logging
import signal
import subprocess
import time

log = logging.getLogger("queueadmin.worker")


class Pool:
    def __init__(self, command: list[str], processes: int, burst: bool = False):
        self.command, self.size, self.burst = command, processes, burst
        self.children: dict[int, subprocess.Popen] = {}
        self.stopping = 0

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for slot in range(self.size):
            self._spawn(slot)
        status = 0
        while self.children:
            time.sleep(0.2)
            for slot, proc in list(self.children.items()):
                code = proc.poll()
                if code is None:
                    continue
                del self.children[slot]
                if self.stopping or (self.burst and code == 0):
                    if code > 0:  # a child ended by our own signal is a clean stop
                        status = status or code
                    continue
                log.warning("worker process %s exited with %s; restarting it", proc.pid, code)
                time.sleep(0.5)
                self._spawn(slot)
        return status

    def _spawn(self, slot: int) -> None:
        proc = subprocess.Popen([*self.command, "--name", f"slot{slot}"])
        self.children[slot] = proc
        log.info("started worker process %s (slot %s)", proc.pid, slot)

    def _on_signal(self, signum, frame) -> None:
        self.stopping += 1
        for proc in self.children.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM if self.stopping == 1 else signal.SIGINT)
