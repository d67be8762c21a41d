"""The registry of workers: who runs where, their heartbeat and current item.

`{prefix}:workers` is a sorted set of worker ids scored by last heartbeat (ms);
`{prefix}:worker:<id>` a hash of details. A worker whose heartbeat is older
than `dead_after` seconds is dead: the first live worker to remove it from the
set recovers its work. Dead workers stay visible (flagged) for an hour.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable

import redis

from queueadmin.core.engine.client.workers import COMMANDS
from queueadmin.core.engine.store.connection import RETRYABLE
from queueadmin.core.engine.store.keys import Keys

log = logging.getLogger("queueadmin.worker")

DEAD_VISIBLE_SECONDS = 3600


def _ms() -> int:
    return int(time.time() * 1000)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Registry:
    def __init__(self, redis, keys: Keys, heartbeat: float = 1.0, dead_after: float = 10.0):
        self.redis, self.keys = redis, keys
        self.heartbeat, self.dead_after = heartbeat, dead_after
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def register(self, wid: str, name: str, host: str, pid: int, queues: list[str]) -> None:
        now = _ms()
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.keys.worker(wid), mapping={
            "id": wid, "name": name, "host": host, "pid": pid, "started": now, "heartbeat": now,
            "queues": ",".join(queues), "current": "[]", "processed": 0, "failed": 0})
        pipe.zadd(self.keys.workers, {wid: now})
        pipe.execute()

    def unregister(self, wid: str) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(self.keys.workers, wid)
        pipe.delete(self.keys.worker(wid))
        pipe.delete(self.keys.worker_control(wid))  # an ask it has done, or that came too late
        pipe.execute()

    def beat(self, wid: str, fields: dict) -> str:
        """Write the heartbeat; returns what an operator asked of this worker
        ("quiet", "stop" or ""; client/workers.py), read in the same trip."""
        now = _ms()
        key = self.keys.worker(wid)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(key, mapping={**fields, "heartbeat": now})
        pipe.hdel(key, "dead")  # back from a stall that made others think it dead
        pipe.persist(key)
        pipe.zadd(self.keys.workers, {wid: now})
        pipe.get(self.keys.worker_control(wid))
        asked = pipe.execute()[-1]
        return asked if asked in COMMANDS else ""

    def start_heartbeat(self, wid: str, snapshot: Callable[[], dict],
                        on_beat: Callable[[str], bool] = lambda asked: False) -> None:
        """Beat every `heartbeat` seconds on a thread; `on_beat` hears what
        was asked of the worker after each beat (and may update the process
        title: at most once a beat); when it says the worker's state changed,
        the beat is written again at once."""
        self._stop.clear()

        def run():
            while not self._stop.wait(self.heartbeat):
                try:
                    if on_beat(self.beat(wid, snapshot())):  # its state changed: shown now, not a beat later
                        self.beat(wid, snapshot())
                except (*RETRYABLE, redis.RedisError) as exc:  # Redis trouble: the dispatcher says so
                    log.debug("heartbeat of %s failed: %s", wid, exc)
                except Exception:  # anything else must not silence the heartbeat for good
                    log.exception("heartbeat of %s failed", wid)

        self._thread = threading.Thread(target=run, name=f"heartbeat-{wid}", daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def find_dead(self) -> list[str]:
        cutoff = _ms() - int(self.dead_after * 1000)
        return self.redis.zrangebyscore(self.keys.workers, "-inf", cutoff)

    def live_count(self) -> int:
        """Workers whose heartbeat is recent (of every queue)."""
        return self.redis.zcount(self.keys.workers, _ms() - int(self.dead_after * 1000), "+inf")

    def dead_on_host(self, host: str) -> list[str]:
        """Former workers of this host whose process is gone (a restart)."""
        me = os.getpid()
        out = []
        for wid in self.redis.zrange(self.keys.workers, 0, -1):
            info = self.redis.hmget(self.keys.worker(wid), "host", "pid")
            if info[0] == host and info[1] and int(info[1]) != me and not pid_alive(int(info[1])):
                out.append(wid)
        return out

    def claim_recovery(self, wid: str) -> bool:
        return self.redis.zrem(self.keys.workers, wid) == 1

    def queues_of(self, wid: str) -> list[str]:
        raw = self.redis.hget(self.keys.worker(wid), "queues")
        return [q for q in (raw or "").split(",") if q]

    def mark_dead(self, wid: str) -> None:
        key = self.keys.worker(wid)
        if self.redis.exists(key):
            pipe = self.redis.pipeline(transaction=False)
            pipe.hset(key, mapping={"dead": 1, "current": "[]"})
            pipe.expire(key, DEAD_VISIBLE_SECONDS)
            pipe.execute()

    def workers(self) -> list[dict]:
        """Every registered worker (live or recently dead), with a `live` flag."""
        cutoff = _ms() - int(self.dead_after * 1000)
        ids = self.redis.zrange(self.keys.workers, 0, -1)
        pipe = self.redis.pipeline(transaction=False)
        for wid in ids:
            pipe.hgetall(self.keys.worker(wid))
        out = []
        for wid, info in zip(ids, pipe.execute()):
            if info:
                info["live"] = int(info.get("heartbeat", 0)) >= cutoff and info.get("dead") != "1"
                out.append(info)
        return out
