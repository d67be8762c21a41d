"""A process's background duties (webhook deliveries, history pruning): one
daemon thread each per process, started once, started again in a forked
child (a pool's worker) and if it died."""
from __future__ import annotations

import os
import threading
from typing import Callable


class OnePerProcess:
    def __init__(self, name: str, make_target: Callable[[], Callable[[], None]]):
        self.name, self.make_target = name, make_target
        self._threads: dict[int, threading.Thread] = {}  # pid -> its thread

    def start(self) -> threading.Thread:
        thread = self._threads.get(os.getpid())
        if thread is None or not thread.is_alive():
            thread = threading.Thread(target=self.make_target(), name=self.name, daemon=True)
            self._threads[os.getpid()] = thread
            thread.start()
        return thread
