"""Steering worker processes from anywhere: ask one to go quiet (take
nothing new, finish what it holds, stay alive) or to stop (the same, then
exit, as on a first SIGTERM).

The ask is a key per worker (`Keys.worker_control`) that the worker's
heartbeat reads in the round trip it already makes every second
(registry.py), so no worker polls for it and the answer comes within about a
heartbeat. Quiet cannot be undone (as Sidekiq's quiet): a quiet worker is
stopped or restarted to serve again. The key expires, so one left behind by
a worker that died before reading it does no harm.
"""
from __future__ import annotations

import time

QUIET, STOP = "quiet", "stop"
COMMANDS = (QUIET, STOP)
CONTROL_TTL = 86_400  # seconds an ask waits for its worker (the worker deletes it as it leaves)


class WorkerSteering:
    def __init__(self, redis, keys, dead_after: float = 10.0):
        self.redis, self.keys, self.dead_after = redis, keys, dead_after

    def live(self, wid: str) -> bool:
        """Whether `wid` is a registered worker whose heartbeat is recent."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zscore(self.keys.workers, wid)
        pipe.hget(self.keys.worker(wid), "dead")
        beat, dead = pipe.execute()
        return beat is not None and dead != "1" and beat >= time.time() * 1000 - self.dead_after * 1000

    def ask(self, wid: str, command: str) -> bool:
        """Ask worker `wid` to go quiet or stop; False when it is not live.
        A stop is never turned back into a quiet (quiet sets only when
        nothing was asked)."""
        if command not in COMMANDS:
            raise ValueError(f"unknown worker command {command!r}")
        if not self.live(wid):
            return False
        self.redis.set(self.keys.worker_control(wid), command, ex=CONTROL_TTL, nx=command == QUIET)
        return True

    def asked(self, wid: str) -> str:
        """What was asked of `wid` and not yet done ("" for nothing)."""
        value = self.redis.get(self.keys.worker_control(wid))
        return value if value in COMMANDS else ""
