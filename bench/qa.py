"""queueadmin under measurement: a migrated throw-away SQLite, the engine's
client, real `manage.py queue_worker` processes, and the drain scenarios that
bench/engine.py and bench/peers.py share.

Only the public engine API is used (QueueClient.define_queue / submit /
status / statuses / results), so the harness keeps working while the engine
changes underneath it. Workers are real `queue_worker` processes (Django
settings, history written to SQLite when a request finishes), started with
`--processes N`.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from benchlib import PROCS, ROOT, CpuMeter, Deadline, percentile, steady_rate

QUEUE = "bench"


class QA:
    def __init__(self, redis_url: str, root: Path = ROOT, python: str | None = None,
                 extra_processors: dict | None = None, pythonpath: list[Path] | None = None):
        self.root = Path(root).resolve()
        self.python = python or sys.executable
        self.url = redis_url
        self.tmp = Path(tempfile.mkdtemp(prefix="qa-bench-"))
        self.db = self.tmp / "db.sqlite3"
        paths = [str(p) for p in (pythonpath or [])]
        self.env = {**os.environ, "REDIS_URL": redis_url, "DATABASE_PATH": str(self.db),
                    "QUEUEADMIN_VAR": str(self.tmp / "var"), "QUEUEADMIN_LOG_LEVEL": "WARNING",
                    "PYTHONUNBUFFERED": "1",
                    "QUEUEADMIN_EXTRA_PROCESSORS": json.dumps(extra_processors or {})}
        if paths:
            self.env["PYTHONPATH"] = os.pathsep.join(paths + [self.env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.n_logs = itertools.count()
        if str(self.root) not in sys.path:
            sys.path.insert(0, str(self.root))
        from queueadmin.core.engine.client.queue_client import QueueClient
        from queueadmin.core.engine.config import QueueConfig
        from queueadmin.core.engine.store.connection import connect

        self.QueueConfig = QueueConfig
        self.client = QueueClient(connect(redis_url), prefix=os.environ.get("QUEUEADMIN_PREFIX", "qa"))
        self.redis = self.client.redis

    def migrate(self) -> None:
        import subprocess

        subprocess.run([self.python, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=self.root,
                       env=self.env, check=True)

    def define(self, concurrency: int = 10) -> None:
        """(Re)define the benchmark queue: long retention so results stay readable."""
        self.client.define_queue(QUEUE, self.QueueConfig(concurrency=concurrency, retention_seconds=6 * 3600,
                                                         lease_seconds=60))

    def workers(self, processes: int, burst: bool = False):
        args = [self.python, "manage.py", "queue_worker", "--queues", QUEUE, "--processes", processes]
        if burst:
            args.append("--burst")
        return PROCS.start(args, cwd=self.root, env=self.env, log=self.tmp / f"worker-{next(self.n_logs)}.log")

    def worker_log_tail(self, n: int = 2000) -> str:
        return "\n".join(p.read_text(errors="replace")[-n:] for p in sorted(self.tmp.glob("worker-*.log")))

    # -- submitting -------------------------------------------------------------

    def submit(self, items, **kw) -> str:
        return self.client.submit(QUEUE, kw.pop("processor", "echo"), items, dedup=False, **kw).id

    # -- reading the outcome ----------------------------------------------------

    def records(self, rids: list[str], limit_per_request: int | None = None) -> list[dict]:
        out = []
        for rid in rids:
            it = self.client.results(rid)
            if limit_per_request:
                it = itertools.islice(it, limit_per_request)
            out.extend(r for r in it if r.get("started_at") is not None and r.get("status") == "done")
        return out

    def progress(self, since_minute: int) -> int | None:
        """Items done in the queue since Redis was flushed, from the per-minute
        throughput counters the workers keep (cheap to poll); None if the
        engine has no such counters."""
        try:
            keys = [self.client.keys.throughput(QUEUE, m) for m in range(since_minute, int(time.time() // 60) + 1)]
        except AttributeError:
            return None
        pipe = self.redis.pipeline(transaction=False)
        for k in keys:
            pipe.hget(k, "done")
        return sum(int(v or 0) for v in pipe.execute())

    def wait_done(self, rids: list[str], expect: int, deadline: Deadline, poll: float = 0.2) -> int:
        """Wait until the requests have `expect` items done in all; returns that count."""
        done = 0
        while deadline:
            sts = self.client.statuses(rids) if len(rids) > 1 else [self.client.status(rids[0])]
            done = sum(s["done"] for s in sts if s)
            if done >= expect:
                break
            time.sleep(poll)
        return done


def rate_from_records(recs: list[dict], first_n: int | None = None) -> dict:
    """Steady drain rate from result records (worker, started_at, finished_at),
    optionally over only the first `first_n` items finished."""
    recs = sorted(recs, key=lambda r: r["finished_at"])
    if first_n:
        recs = recs[:first_n]
    per: dict[str, dict] = {}
    for r in recs:
        w = per.setdefault(r["worker"], {"first": r["started_at"], "last": 0.0, "finishes": [], "count": 0})
        w["first"] = min(w["first"], r["started_at"])
        w["last"] = max(w["last"], r["finished_at"])
        w["finishes"].append(r["finished_at"])
        w["count"] += 1
    return steady_rate(per)


# -- drain scenarios ----------------------------------------------------------

def drain(qa: QA, server, layout: list[tuple[int, int]], processes: int = 2, window: int | None = None,
          timeout: float = 300.0, concurrency: int | None = None, stop_at: int | None = None,
          mark: Callable[[str], None] = lambda stage: None) -> dict:
    """Queue requests (layout: [(items, priority), ...]), then start `processes`
    workers, wait until all is done (or `stop_at` items are), then stop them
    (SIGTERM: they finish what they hold). Rate: steady window over all
    items, or over the first `window` finished. CPU per item: the workers'
    process tree and redis-server, sampled while they run. `mark` is called
    with "submit", "drain" and "done" as each stage begins (and the last ends)."""
    server.flushall()
    qa.define()
    mark("submit")
    t0 = time.perf_counter()
    rids = []
    for n, (items, prio) in enumerate(layout):
        base = n * 1_000_000
        rids.append(qa.submit(range(base, base + items), priority=prio, concurrency=concurrency))
    submit_s = time.perf_counter() - t0
    mark("drain")
    total = sum(i for i, _ in layout)
    expect = stop_at or total
    minute = int(time.time() // 60)
    t_start = time.time()
    proc = qa.workers(processes)
    meter = CpuMeter(server.r, [proc.pid])  # the worker pool's process tree, and redis-server via INFO
    deadline = Deadline(timeout)
    last, since = -1, time.monotonic()
    while deadline:
        done = qa.progress(minute)
        if done != last:
            last, since = done, time.monotonic()
        if done is None or time.monotonic() - since > 2.0:  # no (or stalled) counters: ask the requests
            done = sum(s["done"] for s in qa.client.statuses(rids) if s)
        meter.sample(done)
        if done >= expect or proc.poll() is not None:
            break
        time.sleep(0.05)
    wall = time.time() - t_start
    mark("done")
    PROCS.stop(proc, timeout=30)
    done = sum(s["done"] for s in qa.client.statuses(rids) if s)
    per_req = None
    if stop_at is not None and len(rids) == 1:
        per_req = expect + 1000  # results are in index order (FIFO): read only the head
    recs = qa.records(rids, per_req)
    res = rate_from_records(recs, window)
    res.update(items=total, requests=len(rids), done=done, submit_s=submit_s, wall_s=wall,
               complete=done >= expect, processes=processes, **meter.per_job(expect))
    if res["rate"]:
        res["us_per_item"] = 1e6 / res["rate"]
    return res


def latency(qa: QA, server, n: int, rate: float, processes: int = 2, timeout: float = 120.0) -> dict:
    """Single-item submissions at a steady rate to idle workers: started_at
    (result record) minus the producer's clock just before submit()."""
    server.flushall()
    qa.define()
    proc = qa.workers(processes)
    # warm up: a few requests until both worker processes have run something
    warm = []
    dl = Deadline(60)
    while dl:
        warm.append(qa.submit([0]))
        time.sleep(0.05)
        if len(warm) % 10 == 0:
            qa.wait_done(warm, len(warm), Deadline(10))
            if len({r["worker"] for r in qa.records(warm)}) >= processes or len(warm) >= 200:
                break
    time.sleep(1.0)  # idle
    sent: dict[str, float] = {}
    t0 = time.perf_counter()
    for k in range(n):
        target = t0 + k / rate
        while (d := target - time.perf_counter()) > 0:
            time.sleep(d if d > 0.002 else 0)
        ts = time.time()
        sent[qa.submit([k])] = ts
    send_s = time.perf_counter() - t0
    rids = list(sent)
    done = qa.wait_done(rids, n, Deadline(timeout), poll=0.5)
    PROCS.stop(proc, timeout=30)
    lats = []
    for rid in rids:
        for r in qa.records([rid]):
            lats.append(r["started_at"] - sent[rid])
    return {"n": n, "done": done, "rate": rate, "send_rate": n / send_s, "p50": percentile(lats, 50),
            "p90": percentile(lats, 90), "p99": percentile(lats, 99), "max": max(lats) if lats else None}
