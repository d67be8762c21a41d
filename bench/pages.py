"""Dashboard pages at scale (issue 10): the dead-letters page with 100,000
dead letters and the in-flight page with tens of thousands of items waiting
for a retry; median and p95 server time of each page (goal: < 200 ms).

The dead letters and waiting items are made for real: requests of the
built-in `fail` processor drained by `queue_worker --burst` (2 processes),
on a queue with one attempt (dead letters) and on one with two attempts and
an hour's backoff (items waiting for their retry, which sit in flight).
Pages are timed in this process through Django's test client, full page,
htmx fragment and the fragment the live relay renders.

Everything runs on 127.0.0.1: its own redis-server on a free port, its own
SQLite file, its own worker processes; all stopped at the end (by pid).

    bin/bench pages                                     # 100,000 dead letters, 20,000 waiting
    bin/bench pages --dead 20000 --waiting 5000 --runs 10   # quick
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.dashboard import bench_user, setup, time_cases  # noqa: E402

GOAL_MS = 200


def populate(dead: int, waiting: int, requests: int) -> dict:
    """`dead` dead letters over `requests` requests plus one big request of a
    tenth of them; `waiting` items waiting for a retry in one request."""
    from queueadmin.core import services
    from queueadmin.core.models import Queue

    Queue.objects.update_or_create(name="doomed", defaults={"max_attempts": 1})
    Queue.objects.update_or_create(name="retrying", defaults={"max_attempts": 2, "backoff_seconds": 3600,
                                                                "backoff_max_seconds": 3600})
    services.sync_queues()
    started = time.perf_counter()
    big_n = dead // 10
    per = max(1, (dead - big_n) // max(1, requests))
    ids = [services.submit("doomed", "fail", [f"item {i}" for i in range(per)], dedup=False).id
           for _ in range(requests)]
    big = services.submit("doomed", "fail", [f"item {i}" for i in range(big_n)], dedup=False).id
    slow = services.submit("retrying", "fail", [f"item {i}" for i in range(waiting)], dedup=False).id if waiting \
        else None
    print(f"submitted {per * requests + big_n:,} doomed items in {requests + 1} requests and {waiting:,} "
          f"to retry in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return {"doomed": ids + [big], "big": big, "slow": slow}


def drain(tmp: Path, queues: str, expect_dead: int, expect_waiting: int, doomed: list[str], slow: str | None):
    """queue_worker --burst until every item failed (or waits for its retry)."""
    from queueadmin.core import services

    eng = services.engine()
    started = time.perf_counter()
    log = open(tmp / "worker.log", "wb")
    proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "queue_worker", "--queues", queues,
                             "--processes", "2", "--burst"], cwd=ROOT, env=os.environ.copy(), stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        while True:
            pipe = eng.redis.pipeline(transaction=False)
            for rid in doomed:
                pipe.zcard(eng.keys.request(rid).dead)
            dead = sum(pipe.execute())
            waiting = eng.redis.zcard(eng.keys.request(slow).leases) if slow else 0
            if dead >= expect_dead and waiting >= expect_waiting:
                break
            if proc.poll() is not None and proc.returncode != 0:
                raise SystemExit(f"queue_worker failed, see {tmp / 'worker.log'}")
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    print(f"drained: {dead:,} dead letters, {waiting:,} waiting for a retry, in "
          f"{time.perf_counter() - started:.1f}s", file=sys.stderr)


def time_pages(ids: dict, dead: int, runs: int) -> list[tuple[str, float, float]]:
    from django.test import Client

    from queueadmin.core.live.render import render_topic

    c = Client()
    c.force_login(bench_user())
    last = max(1, -(-dead // 50))
    big, slow = ids["big"], ids["slow"]
    cases = [
        ("dead letters, page 1 (full)", lambda: c.get("/dead/")),
        ("dead letters, page 1 (htmx fragment)", lambda: c.get("/dead/", headers={"HX-Request": "true"})),
        (f"dead letters, middle page ({last // 2:,})", lambda: c.get(f"/dead/?page={last // 2}")),
        (f"dead letters, last page ({last:,})", lambda: c.get(f"/dead/?page={last}")),
        ("dead letters, one queue, page 1", lambda: c.get("/dead/?queue=doomed")),
        (f"dead letters of one request ({dead // 10:,}), last page",
         lambda: c.get(f"/dead/?request={big}&page={-(-(dead // 10) // 50)}")),
        ("dead letters live fragment (relay)", lambda: render_topic("dead:::1", True)),
    ]
    if slow:
        cases += [
            ("in flight, page 1 (full)", lambda: c.get("/inflight/")),
            ("in flight, last page", lambda: c.get("/inflight/?page=100000")),
            ("in flight, stuck only", lambda: c.get("/inflight/?stuck=1")),
            ("in flight live fragment (relay)", lambda: render_topic("inflight::0:1", True)),
        ]
    return time_cases(cases, runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dead", type=int, default=100_000, help="dead letters to make")
    ap.add_argument("--requests", type=int, default=100, help="requests they are spread over (plus a big one)")
    ap.add_argument("--waiting", type=int, default=20_000, help="items waiting for a retry (in flight)")
    ap.add_argument("--runs", type=int, default=20, help="timed runs of each page")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="qa-bench-pages-") as d:
        tmp = Path(d)
        redis_proc = setup(tmp)
        try:
            ids = populate(args.dead, args.waiting, args.requests)
            per = max(1, (args.dead - args.dead // 10) // max(1, args.requests))
            made = per * args.requests + args.dead // 10
            drain(tmp, "doomed,retrying", made, args.waiting, ids["doomed"], ids["slow"])
            rows = time_pages(ids, made, args.runs)
        finally:
            from queueadmin.core import embedded

            embedded.stop(redis_proc)
    print(f"\nqueueadmin dashboard pages — {made:,} dead letters in {args.requests + 1} requests, "
          f"{args.waiting:,} items in flight (waiting for a retry), {os.cpu_count()} CPUs, "
          f"load average {load:.1f} at start, {os.getloadavg()[0]:.1f} at end, {args.runs} runs each\n")
    print(f"| {'page':<50} | {'median':>9} | {'p95':>9} | goal     |")
    print(f"|{'-' * 52}|{'-' * 11}|{'-' * 11}|----------|")
    for name, med, p95 in rows:
        print(f"| {name:<50} | {med:>6.1f} ms | {p95:>6.1f} ms | < {GOAL_MS} ms |")


if __name__ == "__main__":
    main()
