#!/usr/bin/env python
"""This tree against an older one, on the paths a change must not slow
(issue 24's "nothing else slower"), with drains long enough to resolve a
few percent on a noisy machine. Not a test.

    bin/bench regress --base ceaa9a9 [--rounds 4] [--items 100000] [--redis both]
    bin/bench regress --base ceaa9a9 --count [--rounds 1] [--items 10000] [--stages levels,engine]

Both trees are copied to temp dirs (this one as it is on disk, the base with
`git archive`). Each round measures the two trees one after the other on the
same redis-server, in alternating order (A B, then B A), each in a process
of its own that imports that tree and runs its workers (2 processes):

  bulk      one request of --items items: its submit rate, then its drain;
  levels    100 requests at 100 priority levels, --items in all: the drain;
  one       --items / 5 one-item requests submitted singly: submit, drain;
  engine    half of the bulk and levels requests again, drained by one
            in-process worker: the engine's CPU per item without the Django
            side and a process's start (what `queue_worker` adds).

It prints each tree's median and, per measure, the median of the rounds'
ratios (this tree / base) with their range: a ratio whose range holds 1.0
is not a difference this run can tell. With --count, the same stages are
counted instead of timed (callgrind.py): the instructions redis-server
executed per item for each submit and drain, and the in-process worker's
own; a figure repeats to about 1% where a rate moves by 15%.
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
import callgrind  # noqa: E402
from callgrind import Counter  # noqa: E402

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


# --count: instructions per item instead of time (callgrind.py), Redis's for each stage, and the
# in-process worker's own; a ratio above 1 is this tree doing more work
COUNTS = [("bulk", "submit_ir", "bulk submit, Redis instructions/item"),
          ("bulk", "redis_ir", "bulk drain, Redis instructions/item"),
          ("levels", "redis_ir", "100 levels drain, Redis instructions/item"),
          ("one", "submit_ir", "one-item submit, Redis instructions/job"),
          ("one", "redis_ir", "one-item drain, Redis instructions/job"),
          *[(part, key, f"engine alone, {name}, {who} instructions/item")
            for part, name in (("engine_bulk", "bulk"), ("engine_levels", "100 levels"))
            for key, who in (("worker_ir", "worker"), ("redis_ir", "Redis"))]]


# -- one tree, one round (a child process importing that tree) ---------------------

class Attached:
    """The running redis-server as qa.drain wants it."""

    def __init__(self, url: str):
        import redis

        self.r = redis.Redis.from_url(url, decode_responses=True)

    def flushall(self) -> None:
        self.r.flushall()
        self.r.execute_command("MEMORY", "PURGE")


def child(root: Path, url: str, items: int, counted: Counter | None, stages: set[str]) -> dict:
    import queueadmin
    from qa import QA, drain

    if Path(queueadmin.__file__).resolve().parent.parent != root.resolve():
        raise SystemExit(f"queueadmin came from {queueadmin.__file__}, not from {root}")
    qa = QA(url, root=root)
    qa.migrate()
    server = Attached(url)
    out = {}

    def kept(res, counts, **more):  # the rate, and CPU per item of the workers and redis-server (start-up excluded)
        return {"rate": res["rate"], "done": res["done"], "worker_us": res.get("worker_us"),
                "redis_us": res.get("redis_us"), **counts.per(res["items"]), **more}

    counts = Stages(counted)
    if "bulk" in stages:
        res = drain(qa, server, [(items, 50)], timeout=3600, mark=counts.mark)
        out["bulk"] = kept(res, counts, submit=items / res["submit_s"])
    if "levels" in stages:
        res = drain(qa, server, [(items // 100, 99 - k) for k in range(100)], timeout=3600, mark=counts.mark)
        out["levels"] = kept(res, counts)
    if "one" in stages:
        n = items // 5
        res = drain(qa, server, [(1, 50)] * n, timeout=3600, mark=counts.mark)
        out["one"] = kept(res, counts, submit=n / res["submit_s"])
    for part, layout in (("engine_bulk", "bulk"), ("engine_levels", "levels")) if "engine" in stages else ():
        out[part] = engine_child(root, url, items, layout, counted) if counted else engine_alone(url, items, layout)
    shutil.rmtree(qa.tmp, ignore_errors=True)
    return out


class Stages:
    """Redis's instructions for a drain's submit and for its drain (--count)."""

    def __init__(self, counted: Counter | None):
        self.counted, self.seen = counted, {}

    def mark(self, stage: str) -> None:
        if self.counted is None:
            return
        if stage == "submit":
            self.counted.zero()
        else:  # the stage before it ends
            self.seen["submit_ir" if stage == "drain" else "redis_ir"] = self.counted.read()

    def per(self, items: int) -> dict:
        seen, self.seen = self.seen, {}
        return {key: value / items for key, value in seen.items()}


LAYOUTS = {"bulk": lambda items: [(items // 2, 50)],
           "levels": lambda items: [(items // 200, 99 - k) for k in range(100)]}


def engine_child(root: Path, url: str, items: int, layout: str, redis_counted: Counter) -> dict:
    """engine_alone in a process of its own under callgrind, counting its own
    instructions and Redis's over the drain."""
    import callgrind

    cmd = [*callgrind.wrap(redis_counted.out_dir), sys.executable, __file__, "--child", str(root), "--url", url,
           "--items", str(items), "--engine", layout, "--count-pid", str(redis_counted.pid),
           "--count-dir", str(redis_counted.out_dir)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "QA_CALLGRIND": "1"})
    if done.returncode:
        raise RuntimeError(f"{root}: engine {layout}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def engine_alone(url: str, items: int, layout: str, redis_counted: Counter | None = None) -> dict:
    """The same requests drained by one in-process worker (burst), without
    the Django side or a process's start: the engine's own CPU per item, the
    worker's (process time) and Redis's (INFO cpu)."""
    from queueadmin.core.engine.client.queue_client import QueueClient
    from queueadmin.core.engine.config import QueueConfig
    from queueadmin.core.engine.runtime.processors import Processors
    from queueadmin.core.engine.runtime.worker import Worker
    from queueadmin.core.engine.store.connection import connect

    import callgrind

    r = connect(url)
    r.flushall()
    client = QueueClient(r)
    client.define_queue("regress", QueueConfig(retention_seconds=3600))
    for n, priority in LAYOUTS[layout](items):
        client.submit("regress", "echo", list(range(n)), dedup=False, priority=priority)
    worker = Worker(client, ["regress"], Processors({"echo": "queueadmin.core.engine.runtime.processors.echo"}),
                    burst=True, install_signals=False, report_in_background=True)
    counted = [c for c in (redis_counted, callgrind.self_counter(redis_counted.out_dir) if redis_counted else None)
               if c]
    for c in counted:
        c.zero()
    redis0, cpu0, t0 = redis_cpu(r), time.process_time(), time.perf_counter()
    worker.work()
    seconds, cpu, redis_s = time.perf_counter() - t0, time.process_time() - cpu0, redis_cpu(r) - redis0
    done = max(1, worker.processed)
    out = {"rate": done / seconds, "done": worker.processed, "worker_us": cpu / done * 1e6,
           "redis_us": redis_s / done * 1e6}
    if counted:
        out.update(redis_ir=counted[0].read() / done, worker_ir=counted[1].read() / done)
    return out


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


def one_round(tree: Path, url: str, items: int, counted: Counter | None, stages: set[str]) -> dict:
    """One tree's measures in a child process; past its time, or when this
    process is stopped, it is sent SIGTERM, on which it stops the worker
    pools it started (and SIGKILL 30 s later): a child killed outright would
    leave them running."""
    cmd = [sys.executable, __file__, "--child", str(tree), "--url", url, "--items", str(items),
           "--stages", ",".join(sorted(stages))]
    if counted:
        cmd += ["--count-pid", str(counted.pid), "--count-dir", str(counted.out_dir)]
    timeout = 4 * 3600 if counted else 1800
    proc = PROCS.adopt(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
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


def compare(rep: Report, runs: dict, rounds: int, counted: bool) -> list[dict]:
    rows, out = [], []
    for part, key, label in (COUNTS if counted else MEASURES + CPU + ENGINE):
        if part not in runs["new"][0]:
            continue  # a stage not run (--stages)
        new = [r[part].get(key) for r in runs["new"]]
        old = [r[part].get(key) for r in runs["base"]]
        ratios = sorted(a / b for a, b in zip(new, old) if a and b)
        row = {"measure": label, "new": median(new), "base": median(old), "ratio": median(ratios),
               "low": ratios[0] if ratios else None, "high": ratios[-1] if ratios else None}
        out.append(row)
        rows.append([label, fmt(row["new"]), fmt(row["base"]), f"{row['ratio']:.2f}×" if ratios else "-",
                     f"{row['low']:.2f}-{row['high']:.2f}" if ratios else "-"])
    rep(table(["measure", "this tree", "base", f"ratio (median of {rounds})", "range"], rows, "lrrrr"))
    if counted:
        rep("  (instructions that redis-server and the in-process worker executed, counted by callgrind)")
    return out


def run_server(rep: Report, which: str, trees: dict, args) -> dict:
    from benchlib import RedisServer
    from install import debian_redis

    binary = None
    if which == "debian":
        binary = debian_redis(rep)
        if not binary:
            raise SystemExit("Debian's redis-server could not be installed")
    dumps = Path(tempfile.mkdtemp(prefix="qa-regress-callgrind-"))
    atexit.register(shutil.rmtree, dumps, True)
    server = RedisServer(binary=binary, wrap=callgrind.wrap(dumps) if args.count else ())
    counted = Counter(server.proc.pid, dumps) if args.count else None
    shown = [(p, m, label.split(",")[0]) for p, m, label in (COUNTS[:5] if args.count else MEASURES)]
    runs = {"new": [], "base": []}
    try:
        rep(f"\n## {server.describe()}" + (", counted by callgrind" if counted else ""))
        for k in range(args.rounds):
            order = ["new", "base"] if k % 2 == 0 else ["base", "new"]
            for name in order:
                t0 = time.monotonic()
                res = one_round(trees[name], server.url, args.items, counted, args.stages)
                runs[name].append(res)
                rep(f"  round {k + 1} {name:>4}: " + ", ".join(f"{what} {fmt(res[p][m])}" for p, m, what in shown
                                                               if p in res)
                    + f" ({time.monotonic() - t0:.0f} s, load {os.getloadavg()[0]:.2f})")
        rows = compare(rep, runs, args.rounds, bool(counted))
    finally:
        server.stop()
    return {"redis": server.version, "runs": runs, "compare": rows}


STAGES = ("bulk", "levels", "one", "engine")


def stage_set(text: str) -> set[str]:
    chosen = {s.strip() for s in text.split(",") if s.strip()}
    if not chosen or chosen - set(STAGES):
        raise argparse.ArgumentTypeError(f"stages are among {', '.join(STAGES)}")
    return chosen


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", help="the commit to compare against (e.g. the tree before an issue)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per server, each running both trees (default 4)")
    ap.add_argument("--items", type=int, help="items of the bulk and levels drains (default 100,000; 10,000 with "
                                              "--count)")
    ap.add_argument("--count", action="store_true",
                    help="count instructions (callgrind) instead of timing: exact to about 1%% where time moves "
                         "15%%, at about 50 times the time; valgrind is installed with apt-get if missing")
    ap.add_argument("--redis", choices=("both", "debian", "embedded"), default="both")
    ap.add_argument("--stages", type=stage_set, default=set(STAGES),
                    help=f"which stages to run, comma-separated (default all: {','.join(STAGES)})")
    ap.add_argument("--json", type=Path, help="also write every figure as JSON to this file")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--engine", choices=sorted(LAYOUTS), help=argparse.SUPPRESS)
    ap.add_argument("--count-pid", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--count-dir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.items = args.items or (10_000 if args.count else 100_000)
    counted = Counter(args.count_pid, args.count_dir) if args.count_pid else None
    if args.engine:
        print(json.dumps(engine_alone(args.url, args.items, args.engine, counted)))
        return 0
    if args.child:
        install_signal_cleanup()  # SIGTERM (one_round's timeout) stops the worker pools it started
        try:
            print(json.dumps(child(args.child, args.url, args.items, counted, args.stages)))
        finally:
            PROCS.stop_all()
        return 0
    if not args.base:
        ap.error("--base is required")
    if args.items < 1000 or args.rounds < 1:
        ap.error("--items must be at least 1,000 and --rounds at least 1")
    install_signal_cleanup()
    rep = Report("regress")
    if args.count and not callgrind.available(rep):
        raise SystemExit("--count needs valgrind (apt-get install -y valgrind)")
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
