"""The no-op job handler every Python system runs in bench/peers.py, and the
command line its drivers share.

`hit(ts)` is the whole no-op job: it notes the start time (and, for an epoch timestamp ts, the
enqueue-to-start latency ts -> now), then the finish time in 10 ms buckets.
`nap(s)` / `anap(s)` are the I/O-bound jobs of bench/runtime.py: a blocking
`time.sleep(s)` / an `await asyncio.sleep(s)`, then the same record.
A daemon thread writes this process's figures to $BENCH_STATS_DIR/<pid>.json
five times a second, so the orchestrator can see progress and compute rates
without touching the system under test. Standard library only.
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import threading
import time

_lock = threading.Lock()
_state = {"pid": os.getpid(), "count": 0, "first": None, "last": None, "buckets": {}, "lat": []}
_dirty = False
_writer_pid = 0


def hit(ts=0.0, start: float | None = None) -> None:
    """Record one job done; `start`: when it began (default now)."""
    global _dirty
    start = time.time() if start is None else start
    try:
        ts = float(ts)
    except (TypeError, ValueError):
        ts = 0.0
    end = time.time()
    with _lock:
        s = _state
        if s["first"] is None:
            s["first"] = start
            _start_writer()
        elif start < s["first"]:  # jobs run at once: the earliest start
            s["first"] = start
        if ts > 1e9:  # an epoch timestamp: a latency job (drain jobs carry small numbers)
            s["lat"].append(start - ts)
        s["count"] += 1
        s["last"] = end
        b = int(end * 100)
        s["buckets"][b] = s["buckets"].get(b, 0) + 1
        _dirty = True


def nap(seconds) -> None:
    start = time.time()
    time.sleep(float(seconds))
    hit(0.0, start)


async def anap(seconds) -> None:
    import asyncio

    start = time.time()
    await asyncio.sleep(float(seconds))
    hit(0.0, start)


def qa_job(item):
    """queueadmin processor (registered as `bench` through QUEUEADMIN_EXTRA_PROCESSORS)."""
    hit(item)
    return None


def qa_sleep(item):
    """queueadmin's built-in `sleep` processor, recorded (`bench_sleep`)."""
    from queueadmin.core.engine.runtime.processors import sleep

    start = time.time()
    out = sleep(item)
    hit(0.0, start)
    return out


async def qa_async_sleep(item):
    """queueadmin's built-in `async_sleep` processor, recorded (`bench_async_sleep`)."""
    from queueadmin.core.engine.runtime.processors import async_sleep

    start = time.time()
    out = await async_sleep(item)
    hit(0.0, start)
    return out


def _write() -> None:
    global _dirty
    d = os.environ.get("BENCH_STATS_DIR")
    if not d:
        return
    with _lock:
        if not _dirty:
            return
        text = json.dumps(_state)
        _dirty = False
    path = os.path.join(d, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _loop() -> None:
    while True:
        time.sleep(0.2)
        try:
            _write()
        except OSError:
            pass


def _start_writer() -> None:
    """Start the writer thread in this process (once per process: forked
    worker processes start their own)."""
    global _writer_pid
    if _writer_pid == os.getpid():
        return
    _writer_pid = _state["pid"] = os.getpid()
    threading.Thread(target=_loop, daemon=True, name="benchrec").start()
    atexit.register(_write)


# -- drivers' command line -------------------------------------------------------

KINDS = ("noop", "sleep", "async_sleep")

def parse(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["enqueue", "latency", "worker", "info"])
    ap.add_argument("--url", required=True)
    ap.add_argument("--n", type=int, default=0)
    ap.add_argument("--offset", type=int, default=0, help="first job number (parallel fillers)")
    ap.add_argument("--bulk", action="store_true", help="use the system's bulk API")
    ap.add_argument("--rate", type=float, default=200.0, help="jobs/s for latency")
    ap.add_argument("--kind", choices=KINDS, default="noop",
                    help="jobs to enqueue: no-op, a blocking sleep, an asyncio sleep")
    ap.add_argument("--seconds", type=float, default=0.05, help="the sleep of --kind sleep/async_sleep")
    ap.add_argument("--pool", default="", help="worker variant where a system has several (Celery: prefork, threads)")
    return ap.parse_args(argv)


def emit(**kw) -> None:
    print("BENCH " + json.dumps(kw), flush=True)


def paced(n: int, rate: float):
    """Yield k = 0..n-1 at a steady rate (a sleep until each slot)."""
    t0 = time.perf_counter()
    for k in range(n):
        target = t0 + k / rate
        while (d := target - time.perf_counter()) > 0:
            time.sleep(d if d > 0.002 else 0)
        yield k


async def apaced(n: int, rate: float):
    import asyncio

    t0 = time.perf_counter()
    for k in range(n):
        target = t0 + k / rate
        d = target - time.perf_counter()
        if d > 0:
            await asyncio.sleep(d)
        yield k
