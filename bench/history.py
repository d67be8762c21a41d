"""The metrics history (issue 22, items 1 and 2): what it costs. Prints a table.

1. Redis memory of 14 days of per-minute points (and the per-hour points the
   same writes make) for 20 queues and 10 processors, every minute busy
   (the worst case: a minute without items writes nothing), written at
   injected times through the one script workers use (history_add); the
   90 days of per-hour points are the measured per-day cost times 91.
2. A worker's CPU per item with and without the history writes, in the
   same run, interleaved (history.ENABLED switched off for the rounds
   without; the only switch, kept for this bench): in-process burst
   workers draining requests of `echo` (the engine's own overhead, where
   a few microseconds show most), CPU time of this process per item. And
   the per-item bookkeeping alone (timeit), now and as it was before the
   history: the part of a worker's work that the history changed.
3. The overview's server time (full page, Django's test client) with
   100,000 dead letters made for real (the `fail` processor drained by
   `queue_worker --burst`) and the 14 days of history above, at the
   default range (1 h) and at 24 h and 14 days; and the charts' partial.

Everything runs on 127.0.0.1: its own redis-server on a free port, its own
SQLite file, its own worker processes; all stopped at the end (by pid).

    bin/bench history                               # as above
    bin/bench history --dead 20000 --rounds 4 --items 2000   # quick
    bin/bench history --only-cpu                             # the worker's CPU per item alone
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.dashboard import bench_user, setup, time_cases  # noqa: E402

QUEUES, PROCESSORS, DAYS = 20, 10, 14


def fill_history(queues: list[str], processors: list[str], days: int) -> float:
    """Every minute of `days` days for each series; returns seconds taken."""
    from queueadmin.core import services
    from queueadmin.core.engine.features import history
    from queueadmin.core.engine.store import Store

    eng = services.engine()
    store = Store(eng.redis, prefix=eng.keys.prefix)
    rnd = random.Random(1)
    now = int(time.time() // 60)
    series = [history.queue_series(q) for q in queues] + [history.processor_series(p) for p in processors]
    series.append(history.ALL)  # what workers add for the overview
    started = time.perf_counter()
    for s in series:
        trip = store.trip()
        for m in range(now - days * 1440 + 1, now + 1):
            p = history.Point(done=rnd.randint(50, 5000), failed=rnd.randint(0, 40), run_ms=rnd.randint(10**4, 10**7),
                              max_wait_ms=rnd.randint(0, 60_000))
            for _ in range(4):  # a typical minute fills a few neighbouring buckets
                p.run[rnd.randint(4, 9)] += rnd.randint(1, 1000)
                p.wait[rnd.randint(3, 10)] += rnd.randint(1, 1000)
            history.write(store, s, m, p, trip)
            if len(trip.pipe.command_stack) >= 2000:
                trip.run()
                trip = store.trip()
        trip.run()
    return time.perf_counter() - started


def history_memory(queues, processors) -> dict:
    """Bytes of the minute hashes and of the hour hashes (MEMORY USAGE, every key)."""
    from queueadmin.core import services

    r = services.engine().redis
    sizes = {"m": 0, "h": 0}
    counts = {"m": 0, "h": 0}
    keys = list(r.scan_iter(match="*{h:*", count=5000))
    pipe = r.pipeline(transaction=False)
    for k in keys:
        pipe.memory_usage(k, samples=0)
    for k, n in zip(keys, pipe.execute()):
        kind = k.rsplit(":", 2)[-2]
        sizes[kind] += n or 0
        counts[kind] += 1
    return {"keys": counts, "bytes": sizes, "used_memory": r.info("memory")["used_memory"]}


def cpu_per_item(rounds: int, items: int) -> tuple[list[float], list[float]]:
    """µs of this process's CPU per item, with and without the history
    writes, rounds interleaved (on, off, off, on, ...) so drift hits both."""
    from queueadmin.core import services
    from queueadmin.core.engine.features import history
    from queueadmin.core.engine.runtime.processors import Processors
    from queueadmin.core.engine.runtime.worker import Worker

    eng = services.engine()
    with_h, without = [], []
    for i in range(rounds * 2):
        on = (i % 4) in (0, 3)
        history.ENABLED = on
        for _ in range(items // 100):
            eng.submit("default", "echo", [f"x{j}" for j in range(100)], concurrency=4, dedup=False)
        w = Worker(eng, ["default"], Processors({"echo": "queueadmin.core.engine.runtime.processors.echo"}),
                   burst=True, install_signals=False, threads=4)
        t = time.process_time()
        w.work()
        (with_h if on else without).append((time.process_time() - t) / items * 1e6)
    history.ENABLED = True
    return with_h, without


class _Discard:
    """A pipeline stand-in that drops commands: times only the Python side of stats.record."""

    def hincrby(self, *args):
        pass

    hincrbyfloat = hincrby


def bookkeeping(n: int = 1000, repeat: int = 200) -> tuple[float, float]:
    """µs per item of a worker's figures bookkeeping: now (history.Recorder,
    each item bucketed once for the history and /metrics) and before the
    history (run times and waits kept in lists, bucketed by stats.record)."""
    import timeit

    from queueadmin.core.engine.features import history, stats
    from queueadmin.core.engine.store.keys import Keys

    rnd = random.Random(2)
    values = [(rnd.random() * 0.01, rnd.random() * 0.5) for _ in range(n)]
    keys, pipe = Keys(), _Discard()

    def now():
        rec = history.Recorder()
        for took, wait in values:
            rec.observe("default", "echo", False, took, wait)
        p = rec.by_series()[history.queue_series("default")]
        stats.record_buckets(pipe, keys, "default", done=n, run_counts=p.run, wait_counts=p.wait, run_sum=p.run_s,
                             wait_sum=p.wait_s)

    def before():
        batch = {"done": 0, "run_times": [], "waits": []}
        for took, wait in values:
            batch["done"] += 1
            batch["run_times"].append(took)
            batch["waits"].append(wait)
        stats.record(pipe, keys, "default", **batch)

    per = lambda fn: min(timeit.repeat(fn, number=repeat, repeat=5)) / repeat / n * 1e6  # noqa: E731
    return per(now), per(before)


def time_overview(runs: int) -> list[tuple[str, float, float]]:
    from django.test import Client

    c = Client()
    c.force_login(bench_user())
    cases = [("overview, full page (charts at 1 h)", lambda: c.get("/")),
             ("overview, full page, charts at 24 h", lambda: c.get("/?range=24h")),
             ("overview, full page, charts at 14 days", lambda: c.get("/?range=14d")),
             ("charts partial (every queue), 1 h", lambda: c.get("/charts/?range=1h", headers={"HX-Request": "true"})),
             ("charts partial (every queue), 14 days", lambda: c.get("/charts/?range=14d",
                                                                     headers={"HX-Request": "true"})),
             ("one queue's page, 24 h", lambda: c.get("/queues/q00/?range=24h"))]
    return time_cases(cases, runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dead", type=int, default=100_000, help="dead letters to make")
    ap.add_argument("--rounds", type=int, default=20, help="CPU rounds with, and as many without, the history")
    ap.add_argument("--items", type=int, default=2000, help="items per CPU round")
    ap.add_argument("--only-cpu", action="store_true", help="measure only the worker's CPU per item (quick)")
    ap.add_argument("--runs", type=int, default=20, help="timed runs of each page")
    args = ap.parse_args()
    from bench.pages import drain, populate

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="qa-bench-history-") as d:
        tmp = Path(d)
        redis_proc = setup(tmp)
        try:
            from queueadmin.core import services
            from queueadmin.core.models import Queue

            queues = [f"q{i:02d}" for i in range(QUEUES)]
            for q in queues:
                Queue.objects.update_or_create(name=q)
            services.sync_queues()
            processors = [f"app.tasks.job_{i}" for i in range(PROCESSORS)]
            with_h, without = cpu_per_item(args.rounds, args.items)
            kept_now, kept_before = bookkeeping()
            if args.only_cpu:
                print_cpu(with_h, without, args.items, kept_now, kept_before)
                return
            before = services.engine().redis.info("memory")["used_memory"]
            took = fill_history(queues, processors, DAYS)
            mem = history_memory(queues, processors)
            ids = populate(args.dead, 0, 100)
            per = max(1, (args.dead - args.dead // 10) // 100)
            made = per * 100 + args.dead // 10
            drain(tmp, "doomed", made, 0, ids["doomed"], None)
            pages = time_overview(args.runs)
        finally:
            from queueadmin.core import embedded

            embedded.stop(redis_proc)
    n_series = QUEUES + PROCESSORS + 1  # and the one of every queue together (history.ALL)
    minute_mb, hour_bytes = mem["bytes"]["m"] / 1e6, mem["bytes"]["h"]
    hour_days = mem["keys"]["h"] / n_series
    hour_90_mb = hour_bytes / hour_days * 91 / 1e6
    print(f"\nqueueadmin metrics history — {QUEUES} queues + {PROCESSORS} processors + all = {n_series} series, "
          f"{DAYS} days of points every minute; {os.cpu_count()} CPUs, load average {load:.1f} at start, "
          f"{os.getloadavg()[0]:.1f} at end\n")
    print("| measure | value |")
    print("|---|---|")
    print(f"| per-minute points, {DAYS} days, {n_series} series ({mem['keys']['m']:,} hashes) | {minute_mb:.1f} MB "
          f"({mem['bytes']['m'] / n_series / (DAYS * 1440):.0f} bytes a point) |")
    print(f"| per-hour points, {hour_days:.0f} days written ({mem['keys']['h']:,} hashes) | "
          f"{hour_bytes / 1e6:.2f} MB |")
    print(f"| budget: 14 days per minute + 91 days per hour, {n_series} series | {minute_mb + hour_90_mb:.1f} MB "
          f"({(minute_mb + hour_90_mb) / n_series:.2f} MB a series, whatever the traffic) |")
    print(f"| used_memory grew by (the whole server, as INFO says) | {(mem['used_memory'] - before) / 1e6:.1f} MB |")
    print(f"| writing {DAYS} days x {n_series} series at injected times | {took:.1f} s |")
    print_cpu(with_h, without, args.items, kept_now, kept_before, header=False)
    for name, med, p95 in pages:
        print(f"| {name}, {made:,} dead letters | median {med:.1f} ms, p95 {p95:.1f} ms |")


def print_cpu(with_h, without, items, kept_now, kept_before, header=True) -> None:
    on, off = statistics.median(with_h), statistics.median(without)
    if header:
        print(f"\nqueueadmin metrics history: a worker's CPU per item; {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f}\n\n| measure | value |\n|---|---|")
    print(f"| worker CPU per item, history on ({len(with_h)} rounds of {items:,}) | median {on:.1f} µs, "
          f"min {min(with_h):.1f} µs |")
    print(f"| worker CPU per item, history off ({len(without)} rounds) | median {off:.1f} µs, min {min(without):.1f} µs |")
    print(f"| difference (goal: at most +3 %) | medians {(on - off) / off * 100:+.1f} %, minimums "
          f"{(min(with_h) - min(without)) / min(without) * 100:+.1f} % |")
    print(f"| a worker's figures bookkeeping per item: now (bucketed once for history and /metrics) | "
          f"{kept_now:.2f} µs |")
    print(f"| the same before the history (lists, bucketed by stats.record) | {kept_before:.2f} µs |")


if __name__ == "__main__":
    main()
