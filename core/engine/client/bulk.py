"""Bulk jobs: act on everything a filter matches (retry or discard dead
letters, cancel requests, requeue in-flight items, clear a queue) in bounded
batches, with the job's state and progress in Redis.

Memory and time stay bounded at any number of matches: a job keeps its
targets in a Redis list (request ids, or "rid:entry" pairs) and a cursor, and
each step reads one batch (`BATCH`), acts on it, and saves the cursor and
the counts. Dead-letter jobs keep the candidate requests only and find the
letters that match as they go (deadscan.py), batch by batch.

The job survives the process that runs it: a runner holds a lease key that
it renews each batch; when the lease lapses with the job still running (the
web process restarted), whoever looks at the job next may claim it and go on
from the saved cursor (`stale`, then `BulkRun.run`). Acting is the caller's:
a function from a batch of targets to (done, skipped), so the Django side
keeps its history and audit in step.
"""
from __future__ import annotations

import os
import socket
import time
from typing import Callable

from queueadmin.core.engine.client.deadscan import START, DeadFilter, DeadScan

BATCH = 500
LEASE_MS = 30_000  # a runner silent this long is gone; its job may be resumed
KEEP_SECONDS = 86_400  # a finished job's state is readable this long
RECENT = 200  # jobs listed in the index
KINDS = {"dead": ("retry", "discard"), "requests": ("cancel",), "inflight": ("requeue",), "clear": ("cancel",)}
RUNNING, DONE, FAILED, STOPPED = "running", "done", "failed", "stopped"

Act = Callable[[list[str]], tuple[int, int]]


def new_id() -> str:
    """Sortable by creation (ms, hex) and unique between processes."""
    return f"{int(time.time() * 1000):011x}{os.urandom(3).hex()}"


def now_ms() -> int:
    return int(time.time() * 1000)


class BulkJobs:
    """The jobs' state in Redis (keys.bulk_*): made, read, advanced, finished."""

    def __init__(self, redis, keys):
        self.redis, self.keys = redis, keys

    def create(self, kind: str, action: str, targets, *, flt: DeadFilter | None = None, expected: int = 0,
               exact: bool = True, actor: str = "", label: str = "") -> str:
        """A job over `targets` (an iterable of strings), pushed 1,000 at a time."""
        if action not in KINDS.get(kind, ()):
            raise ValueError(f"no bulk {action!r} for {kind!r}")
        jid, count, chunk = new_id(), 0, []
        for target in targets:
            chunk.append(target)
            if len(chunk) == 1000:
                self.redis.rpush(self.keys.bulk_targets(jid), *chunk)
                count, chunk = count + len(chunk), []
        if chunk:
            self.redis.rpush(self.keys.bulk_targets(jid), *chunk)
            count += len(chunk)
        state = {"id": jid, "kind": kind, "action": action, "filter": flt.to_json() if flt else "",
                 "state": RUNNING if count else DONE, "expected": expected, "exact": int(exact),
                 "targets": count, "done": 0, "skipped": 0, "looked": 0, "cursor": START if kind == "dead" else "0",
                 "created": now_ms(), "finished": 0 if count else now_ms(), "actor": actor, "label": label,
                 "error": ""}
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.keys.bulk_job(jid), mapping=state)
        pipe.zadd(self.keys.bulk_jobs, {jid: state["created"]})
        pipe.zremrangebyrank(self.keys.bulk_jobs, 0, -RECENT - 1)
        pipe.execute()
        if not count:
            self._expire(jid)
        return jid

    def get(self, jid: str) -> dict | None:
        raw = self.redis.hgetall(self.keys.bulk_job(jid))
        if not raw:
            return None
        job = dict(raw)
        for name in ("expected", "exact", "targets", "done", "skipped", "looked", "created", "finished"):
            job[name] = int(job.get(name) or 0)
        job["exact"] = bool(job["exact"])
        job["over"] = job["state"] != RUNNING
        return job

    def recent(self, n: int = 20) -> list[dict]:
        jids = self.redis.zrevrange(self.keys.bulk_jobs, 0, n - 1)
        return [job for job in (self.get(jid) for jid in jids) if job]

    def targets(self, jid: str, start: int = 0, n: int = -1) -> list[str]:
        return self.redis.lrange(self.keys.bulk_targets(jid), start, -1 if n < 0 else start + n - 1)

    def advance(self, jid: str, cursor: str | None, done: int, skipped: int, looked: int) -> None:
        """Save one batch's outcome; a None cursor finishes the job."""
        pipe = self.redis.pipeline(transaction=False)
        key = self.keys.bulk_job(jid)
        pipe.hincrby(key, "done", done)
        pipe.hincrby(key, "skipped", skipped)
        pipe.hincrby(key, "looked", looked)
        if cursor is not None:
            pipe.hset(key, "cursor", cursor)
        pipe.execute()
        if cursor is None:
            self.finish(jid, DONE)

    def finish(self, jid: str, state: str, error: str = "") -> None:
        self.redis.hset(self.keys.bulk_job(jid), mapping={"state": state, "finished": now_ms(), "error": error[:500]})
        self._expire(jid)

    def stop(self, jid: str) -> bool:
        """Ask a running job to stop after its current batch; False if it is not running."""
        job = self.get(jid)
        if not job or job["state"] != RUNNING:
            return False
        self.finish(jid, STOPPED)
        return True

    def _expire(self, jid: str) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.expire(self.keys.bulk_job(jid), KEEP_SECONDS)
        pipe.expire(self.keys.bulk_targets(jid), KEEP_SECONDS)
        pipe.execute()

    # -- who runs a job: a lease, so that a lost runner's job is resumed ----------

    def claim(self, jid: str, runner: str) -> bool:
        return bool(self.redis.set(self.keys.bulk_runner(jid), runner, nx=True, px=LEASE_MS))

    def renew(self, jid: str, runner: str) -> bool:
        """Extend our lease; False if another runner holds it now (ours lapsed)."""
        key = self.keys.bulk_runner(jid)
        if self.redis.get(key) not in (runner, None):
            return False
        self.redis.set(key, runner, px=LEASE_MS)
        return True

    def release(self, jid: str, runner: str) -> None:
        key = self.keys.bulk_runner(jid)
        if self.redis.get(key) == runner:
            self.redis.delete(key)

    def stale(self, jid: str) -> bool:
        """A running job that nobody runs (its runner's process ended)."""
        job = self.get(jid)
        return bool(job) and job["state"] == RUNNING and not self.redis.exists(self.keys.bulk_runner(jid))


class BulkRun:
    """Runs one job to its end, batch by batch, unless another runner holds it."""

    def __init__(self, jobs: BulkJobs, scan: DeadScan, jid: str, act: Act, batch: int = BATCH):
        self.jobs, self.scan, self.jid, self.act, self.batch = jobs, scan, jid, act, batch
        self.runner = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(2).hex()}"
        self._rids: list[str] | None = None  # a dead-letter job's candidate requests, read once

    def run(self) -> dict | None:
        if not self.jobs.claim(self.jid, self.runner):
            return self.jobs.get(self.jid)  # someone else runs it
        try:
            while self.step():
                if not self.jobs.renew(self.jid, self.runner):
                    break  # our lease lapsed and another runner took over
        except Exception as exc:  # whatever went wrong is the job's outcome, not the caller's crash
            self.jobs.finish(self.jid, FAILED, f"{type(exc).__name__}: {exc}")
        finally:
            self.jobs.release(self.jid, self.runner)
        return self.jobs.get(self.jid)

    def step(self) -> bool:
        """One batch; False when the job is over (finished, stopped, gone)."""
        job = self.jobs.get(self.jid)
        if not job or job["state"] != RUNNING:
            return False
        if job["kind"] == "dead":
            return self._dead_step(job)
        pos = int(job["cursor"] or 0)
        targets = self.jobs.targets(self.jid, pos, self.batch)
        done, skipped = self.act(targets) if targets else (0, 0)
        more = len(targets) == self.batch
        self.jobs.advance(self.jid, str(pos + len(targets)) if more else None, done, skipped, len(targets))
        return more

    def _dead_step(self, job: dict) -> bool:
        if self._rids is None:
            self._rids = self.jobs.targets(self.jid)
        flt = DeadFilter.from_json(job["filter"])
        found = self.scan.scan(self._rids, flt, job["cursor"], budget=self.batch, keep=self.batch, full=False)
        done, skipped = self.act([x.pair for x in found.letters]) if found.letters else (0, 0)
        self.jobs.advance(self.jid, found.stopped_at, done, skipped, found.looked)
        return found.stopped_at is not None
