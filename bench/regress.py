#!/usr/bin/env python
"""This tree against an older one, on the paths a change must not slow
(issue 24's "nothing else slower"), with drains long enough to resolve a
few percent on a noisy machine. Not a test.

    bin/bench regress --base ceaa9a9 [--rounds 4] [--items 100000] [--redis both]

Both trees are copied to temp dirs (this one as it is on disk, the base with
`git archive`). Each round measures the two trees one after the other on the
same redis-server, in alternating order (A B, then B A), each in a process
of its own that imports that tree and runs its workers (2 processes):

  bulk      one request of --items items: its submit rate, then its drain;
  levels    100 requests at 100 priority levels, --items in all: the drain;
  one-item  --items / 5 one-item requests submitted singly: submit, drain;
  engine    half of the bulk and levels requests again, drained by one
            in-process worker: the engine's CPU per item without the Django
            side and a process's start (what `queue_worker` adds).

It prints each tree's median and, per measure, the median of the rounds'
ratios (this tree / base) with their range: a ratio whose range holds 1.0
is not a difference this run can tell.
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
if __name__ == "__main__" and "--child" in sys.argv:
    # the measured tree's queueadmin, imported before benchlib puts this checkout first on the path:
    # its client submits, its scripts run (a newer client would make layouts an older worker lacks)
    sys.path.insert(0, sys.argv[sys.argv.index("--child") + 1])
    import queueadmin.core.engine.client.queue_client  # noqa: E402,F401

from benchlib import (PROCS, ROOT, Report, fmt, install_signal_cleanup, machine_line, median,  # noqa: E402
                      redis_cpu, snapshot, table)

MEASURES = [("bulk", "submit", "bulk submit, items/s"), ("bulk", "rate", "bulk drain, items/s"),
            ("levels", "rate", "100 levels drain, items/s"), ("one", "submit", "one-item submit, jobs/s"),
            ("one", "rate", "one-item drain, jobs/s")]
# CPU per item (µs) beside the rates: unlike a rate it does not move with what else the machine runs;
# a ratio above 1 is this tree spending more
CPU = [(part, key, f"{name} drain, {who} µs/item") for part, name in (("bulk", "bulk"), ("levels", "100 levels"),
                                                                      ("one", "one-item"))
       for key, who in (("worker_us", "workers"), ("redis_us", "redis"))]
# the engine alone: one in-process worker, no Django side, no process start (engine_alone)
ENGINE = [(part, key, f"engine alone, {name}, {what}") for part, name in (("engine_bulk", "bulk"),
                                                                          ("engine_levels", "100 levels"))
          for key, what in (("rate", "items/s"), ("worker_us", "worker µs/item"), ("redis_us", "redis µs/item"))]


# -- one tree, one round (a child process importing that tree) ---------------------

class Attached:
    """The running redis-server as qa.drain wants it."""

    def __init__(self, url: str):
        import redis

        self.r = redis.Redis.from_url(url, decode_responses=True)

    def flushall(self) -> None:
        self.r.flushall()
        self.r.execute_command("MEMORY", "PURGE")


def child(root: Path, url: str, items: int) -> dict:
    import queueadmin
    from qa import QA, drain

    if Path(queueadmin.__file__).resolve().parent.parent != root.resolve():
        raise SystemExit(f"queueadmin came from {queueadmin.__file__}, not from {root}")
    qa = QA(url, root=root)
    qa.migrate()
    server = Attached(url)
    out = {}

    def kept(res, **more):  # the rate, and CPU per item of the workers and redis-server (start-up excluded)
        return {"rate": res["rate"], "done": res["done"], "worker_us": res.get("worker_us"),
                "redis_us": res.get("redis_us"), **more}

    res = drain(qa, server, [(items, 50)], timeout=900)
    out["bulk"] = kept(res, submit=items / res["submit_s"])
    res = drain(qa, server, [(items // 100, 99 - k) for k in range(100)], timeout=900)
    out["levels"] = kept(res)
    n = items // 5
    res = drain(qa, server, [(1, 50)] * n, timeout=900)
    out["one"] = kept(res, submit=n / res["submit_s"])
    out["engine_bulk"] = engine_alone(url, [(items // 2, 50)])
    out["engine_levels"] = engine_alone(url, [(items // 200, 99 - k) for k in range(100)])
    shutil.rmtree(qa.tmp, ignore_errors=True)
    return out


def engine_alone(url: str, layout: list[tuple[int, int]]) -> dict:
    """The same requests drained by one in-process worker (burst), without
    the Django side or a process's start: the engine's own CPU per item, the
    worker's (process time) and Redis's (INFO cpu)."""
    from queueadmin.core.engine.client.queue_client import QueueClient
    from queueadmin.core.engine.config import QueueConfig
    from queueadmin.core.engine.runtime.processors import Processors
    from queueadmin.core.engine.runtime.worker import Worker
    from queueadmin.core.engine.store.connection import connect

    r = connect(url)
    r.flushall()
    client = QueueClient(r)
    client.define_queue("regress", QueueConfig(retention_seconds=3600))
    for items, priority in layout:
        client.submit("regress", "echo", list(range(items)), dedup=False, priority=priority)
    worker = Worker(client, ["regress"], Processors({"echo": "queueadmin.core.engine.runtime.processors.echo"}),
                    burst=True, install_signals=False, report_in_background=True)
    redis0, cpu0, t0 = redis_cpu(r), time.process_time(), time.perf_counter()
    worker.work()
    seconds, cpu, redis_s = time.perf_counter() - t0, time.process_time() - cpu0, redis_cpu(r) - redis0
    done = max(1, worker.processed)
    return {"rate": done / seconds, "done": worker.processed, "worker_us": cpu / done * 1e6,
            "redis_us": redis_s / done * 1e6}


# -- the rounds ------------------------------------------------------------------------

def base_tree(commit: str) -> Path:
    """The base commit's files in a temp dir (no .git: nothing to clean up in the repository)."""
    dest = Path(tempfile.mkdtemp(prefix="qa-regress-base-")) / "tree"
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
    tar = dest.parent / "tree.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    tar.unlink()
    atexit.register(shutil.rmtree, dest.parent, True)
    return dest


def one_round(tree: Path, url: str, items: int, timeout: float = 1800) -> dict:
    """One tree's measures in a child process; past `timeout`, or when this
    process is stopped, it is sent SIGTERM, on which it stops the worker
    pools it started (and SIGKILL 30 s later): a child killed outright would
    leave them running."""
    proc = PROCS.adopt(subprocess.Popen([sys.executable, __file__, "--child", str(tree), "--url", url, "--items",
                                         str(items)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        start_new_session=True), grace=30)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        PROCS.stop(proc, timeout=30)
        raise RuntimeError(f"{tree}: no answer in {timeout:.0f} s")
    PROCS.stop(proc)  # answered: nothing of its group is left, and it leaves the list
    if proc.returncode:
        raise RuntimeError(f"{tree}: {err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def compare(rep: Report, runs: dict, rounds: int) -> list[dict]:
    rows, out = [], []
    for part, key, label in MEASURES + CPU + ENGINE:
        new = [r[part].get(key) for r in runs["new"]]
        old = [r[part].get(key) for r in runs["base"]]
        ratios = sorted(a / b for a, b in zip(new, old) if a and b)
        row = {"measure": label, "new": median(new), "base": median(old), "ratio": median(ratios),
               "low": ratios[0] if ratios else None, "high": ratios[-1] if ratios else None}
        out.append(row)
        rows.append([label, fmt(row["new"]), fmt(row["base"]), f"{row['ratio']:.2f}×" if ratios else "-",
                     f"{row['low']:.2f}-{row['high']:.2f}" if ratios else "-"])
    rep(table(["measure", "this tree", "base", f"ratio (median of {rounds})", "range"], rows, "lrrrr"))
    return out


def run_server(rep: Report, which: str, trees: dict, args) -> dict:
    from benchlib import RedisServer
    from install import debian_redis

    binary = None
    if which == "debian":
        binary = debian_redis(rep)
        if not binary:
            raise SystemExit("Debian's redis-server could not be installed")
    server = RedisServer(binary=binary)
    runs = {"new": [], "base": []}
    try:
        rep(f"\n## {server.describe()}")
        for k in range(args.rounds):
            order = ["new", "base"] if k % 2 == 0 else ["base", "new"]
            for name in order:
                t0 = time.monotonic()
                res = one_round(trees[name], server.url, args.items)
                runs[name].append(res)
                rep(f"  round {k + 1} {name:>4}: " + ", ".join(
                    f"{label.split(',')[0]} {fmt(res[p][m])}" for p, m, label in MEASURES)
                    + f" ({time.monotonic() - t0:.0f} s, load {os.getloadavg()[0]:.2f})")
        rows = compare(rep, runs, args.rounds)
    finally:
        server.stop()
    return {"redis": server.version, "runs": runs, "compare": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", help="the commit to compare against (e.g. the tree before an issue)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per server, each running both trees (default 4)")
    ap.add_argument("--items", type=int, default=100_000, help="items of the bulk and levels drains (default 100,000)")
    ap.add_argument("--redis", choices=("both", "debian", "embedded"), default="both")
    ap.add_argument("--json", type=Path, help="also write every figure as JSON to this file")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        install_signal_cleanup()  # SIGTERM (one_round's timeout) stops the worker pools it started
        try:
            print(json.dumps(child(args.child, args.url, args.items)))
        finally:
            PROCS.stop_all()
        return 0
    if not args.base:
        ap.error("--base is required")
    if args.items < 1000 or args.rounds < 1:
        ap.error("--items must be at least 1,000 and --rounds at least 1")
    install_signal_cleanup()
    rep = Report("regress")
    new, described = snapshot(ROOT)
    trees = {"new": new, "base": base_tree(args.base)}
    rep(f"# this tree ({described}) against {args.base}: {args.rounds} rounds per server, "
        f"{args.items:,} items per drain, 2 worker processes")
    rep(f"# {machine_line()}; load average at start {os.getloadavg()[0]:.2f}")
    t0 = time.monotonic()
    data = {"base": args.base, "items": args.items, "servers": {}}
    try:
        for which in (["debian", "embedded"] if args.redis == "both" else [args.redis]):
            data["servers"][which] = run_server(rep, which, trees, args)
    finally:
        PROCS.stop_all()
        if args.json:
            args.json.write_text(json.dumps(data, indent=2, default=str) + "\n")
    rep(f"\n# done in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
