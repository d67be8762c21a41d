#!/usr/bin/env python
"""The worker runtime side by side (issue 9): I/O-bound work and start-up,
queueadmin against Dramatiq, Celery, BullMQ, arq and saq, on Debian's
redis-server 7.0 and on the embedded 6.2. Not a test.

    bin/bench runtime [--quick] [--parts io,startup] [--servers debian,embedded] [--systems qa,dramatiq,...]

Every system runs at its defaults with workers totalling 2 OS processes that
run jobs (queueadmin: `queue_worker --processes 2`; Dramatiq: `--processes 2`,
its 8 threads; Celery: its default prefork pool with 2 children, and
`-P threads` in 2 processes as a second row; BullMQ: concurrency 10 in each
of 2 processes; arq and saq: their async defaults in 2 processes). Jobs are
enqueued first, then the workers are launched; each worker process records
its jobs' start and finish times (bench/peers/benchrec.py, or the same in
JavaScript), so nothing is read from the system under test.

  io       N items (1,000; 300 with --quick) of a 50 ms `time.sleep`, then N
           of a 50 ms `asyncio.sleep`: start-up, time to drain from the
           launch, items/s over that time, and queueadmin's rate over each.
  startup  N no-op jobs (20,000; 10,000 with --quick), bulk-enqueued where the
           system can: start-up (launch -> first job started), the drain
           rate counted from the launch (start-up included) and in the
           steady state (while every worker process was running jobs).

Each part runs once per Redis server (Debian's first: it is installed with
apt-get when /usr/bin/redis-server is missing), on a free loopback port with
a temp dir; medians of --runs runs (3; 1 with --quick). Bounded: a drain
stops at its time cap, the whole run at --budget minutes. Text goes to
bench/out/runtime*.txt as results arrive.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from argparse import Namespace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (OUT, PROCS, ROOT, Deadline, RedisServer, Report, fmt, install_signal_cleanup,  # noqa: E402
                      machine_line, median, snapshot, steady_rate, table, tree_line)
from install import DEBIAN_REDIS, PEERS, debian_redis, peers as install_peers  # noqa: E402
from peers import Bench, System  # noqa: E402
from qa import QA  # noqa: E402

SLEEP = 0.05
PROCESSORS = {"bench": "benchrec.qa_job", "bench_sleep": "benchrec.qa_sleep",
              "bench_async_sleep": "benchrec.qa_async_sleep"}
KIND_TITLE = {"sleep": f"{SLEEP * 1000:.0f} ms time.sleep", "async_sleep": f"{SLEEP * 1000:.0f} ms asyncio.sleep",
              "noop": "no-op"}


class Row(System):
    """One line of the tables: a system with one worker set-up.
    how: kind -> how its job runs that kind of work."""

    def __init__(self, key, label, driver, python, workers, bulk, how, pool=""):
        super().__init__(key, label, driver, python, workers, bulk=bulk)
        self.how_kind, self.pool = how, pool


def rows(py: Path, py_arq: Path, qa_python: str, qa_root: Path) -> list[Row]:
    node = shutil.which("node") or "node"

    def each(python, script, k=2, pool=""):
        extra = ["--pool", pool] if pool else []
        return lambda url: [([python, script, "worker", "--url", url, *extra], PEERS, {})] * k

    qa = lambda url: [([qa_python, "manage.py", "queue_worker", "--queues", "bench", "--processes", 2],  # noqa: E731
                       qa_root, {})]
    qa_how = {"sleep": "processor sleep", "async_sleep": "processor async_sleep (async def)", "noop": "no-op processor"}
    timer = "a timer (Node has no blocking sleep)"
    return [
        Row("qa", "queueadmin, 1-item requests", "qa_bench.py", qa_python, qa, False, qa_how),
        Row("qa-one", "queueadmin, one request", "qa_bench.py", qa_python, qa, True,
            {k: v + ", request concurrency 10 (default)" for k, v in qa_how.items()}),
        Row("dramatiq", "Dramatiq", "dramatiq_bench.py", py,
            lambda url: [([py, "-m", "dramatiq", "dramatiq_bench", "--processes", 2, "--threads", 8], PEERS, {})],
            False, {"sleep": "actor on its 8 threads", "async_sleep": "async actor (AsyncIO middleware)"}),
        Row("celery", "Celery prefork", "celery_bench.py", py, each(py, "celery_bench.py", 1, "prefork"), True,
            {"sleep": "task in 2 child processes", "async_sleep": "asyncio.run() in a task (no async tasks)"},
            pool="prefork"),
        Row("celery-threads", "Celery -P threads", "celery_bench.py", py, each(py, "celery_bench.py", 2, "threads"),
            True, {"sleep": "task on threads", "async_sleep": "asyncio.run() in a task on threads"}, pool="threads"),
        Row("bullmq", "BullMQ", "bullmq_bench.js", node, each(node, "bullmq_bench.js"), True,
            {"sleep": timer, "async_sleep": "a timer (await setTimeout)"}),
        Row("arq", "arq", "arq_bench.py", py_arq, each(py_arq, "arq_bench.py"), False,
            {"sleep": "asyncio.to_thread (coroutines only)", "async_sleep": "coroutine"}),
        Row("saq", "saq", "saq_bench.py", py, each(py, "saq_bench.py"), True,
            {"sleep": "def job in its thread pool", "async_sleep": "coroutine"}),
        Row("rq", "RQ", "rq_bench.py", py, each(py, "rq_bench.py"), True, {}),
        Row("huey", "Huey", "huey_bench.py", py, each(py, "huey_bench.py"), False, {}),
    ]


# -- one drain ----------------------------------------------------------------------

def drain(bench: Bench, row: Row, kind: str, n: int, cap: float) -> dict:
    """Enqueue n jobs of `kind`, launch the workers, wait until all ran (or
    the cap), stop the workers. Times are the worker processes' own records."""
    bench.reset(row)
    bench.drive(row, "enqueue", n, bulk=row.bulk, extra=["--kind", kind, "--seconds", SLEEP])
    stats = Path(tempfile.mkdtemp(prefix=f"{row.key}-{kind}-", dir=bench.tmp))
    launch = time.time()
    procs = bench.start_workers(row, stats)
    try:
        bench.wait_count(stats, n, procs, cap, startup=30.0)
    finally:
        bench.stop_workers(procs)
    per = {k: v for k, v in bench.read_stats(stats).items() if v.get("first")}
    count = sum(v["count"] for v in per.values())
    if not count:
        raise RuntimeError(f"no job ran within 30 s of the launch; worker log in {bench.tmp}")
    first, last = min(v["first"] for v in per.values()), max(v["last"] for v in per.values())
    steady = steady_rate({k: {key: v[key] for key in ("first", "last", "count", "buckets")} for k, v in per.items()})
    return {"n": n, "count": count, "complete": count >= n, "startup": first - launch, "drain_s": last - launch,
            "from_launch": count / (last - launch), "steady": steady["rate"], "processes": len(per)}


def summarize(runs: list[dict]) -> dict:
    out = {k: median([r[k] for r in runs]) for k in ("startup", "drain_s", "from_launch", "steady")}
    out.update(complete=all(r["complete"] for r in runs), processes=max(r["processes"] for r in runs),
               runs=runs)
    return out


# -- tables --------------------------------------------------------------------------

def ratio(a, b) -> str:
    return fmt(a / b, "x") if a and b else "—"


def io_table(res: dict, chosen: list[Row], kind: str) -> str:
    ref = res.get(("qa", kind))
    out = []
    for row in chosen:
        r = res.get((row.key, kind))
        if r is None:
            continue
        if "error" in r:
            out.append([row.label, "FAILED", "", "", "", r["error"][:60]])
            continue
        star = "" if r["complete"] else "*"
        out.append([f"{row.label} {row.version}".strip(), f"{r['startup']:.2f}", f"{r['drain_s']:.2f}{star}",
                    fmt(r["from_launch"]), ratio(ref and ref["from_launch"], r["from_launch"]),
                    row.how_kind.get(kind, "")])
    return table(["system", "start-up s", "drain s", "items/s", "queueadmin ×", "the wait runs as"], out, "lrrrrl")


def startup_table(res: dict, chosen: list[Row]) -> str:
    ref = res.get(("qa-one", "noop")) or {}
    out = []
    for row in chosen:
        r = res.get((row.key, "noop"))
        if r is None:
            continue
        if "error" in r:
            out.append([row.label, "FAILED", "", "", "", "", r["error"][:60]])
            continue
        star = "" if r["complete"] else "*"
        out.append([f"{row.label} {row.version}".strip(), f"{r['startup']:.2f}", fmt(r["from_launch"]) + star,
                    fmt(r["steady"]), ratio(ref.get("from_launch"), r["from_launch"]),
                    ratio(ref.get("steady"), r["steady"]), row.how])
    return table(["system", "start-up s", "jobs/s from launch", "jobs/s steady", "qa × (launch)", "qa × (steady)",
                  "workers"], out, "lrrrrrl")


# -- one server ----------------------------------------------------------------------

def run_server(args, rep: Report, binary: str | None, root: Path, chosen: list[Row], budget: Deadline) -> dict:
    server = RedisServer(binary=binary)
    name = f"Redis {server.version} ({'Debian' if binary == DEBIAN_REDIS else 'embedded'})"
    rep(f"\n# ===== {name}: {server.describe()}")
    qa = QA(server.url, root=root, extra_processors=PROCESSORS, pythonpath=[PEERS])
    try:
        qa.migrate()
        bench = Bench(Namespace(rate=200.0), rep, server, qa)
        for row in chosen:
            try:
                info = bench.drive(row, "info", extra=["--pool", row.pool] if row.pool else [])
                row.version, row.how = info.get("version", ""), info.get("worker", "")
            except Exception as exc:
                row.how = f"info failed: {str(exc)[:200]}"
        for row in chosen:
            if row.key.startswith("qa"):  # its version is the tree measured (in the header)
                row.version, row.how = "", "queue_worker --processes 2 (its defaults)"
        plan = []
        if "io" in args.parts:
            plan += [(kind, args.io_n, args.io_cap) for kind in ("sleep", "async_sleep")]
        if "startup" in args.parts:
            plan.append(("noop", args.noop_n, args.noop_cap))
        runs: dict = {}
        for k in range(args.runs):  # runs interleaved across systems: a busy spell hits all of them alike
            for kind, n, cap in plan:
                for row in chosen:
                    if kind != "noop" and kind not in row.how_kind:
                        continue
                    if not budget:
                        rep(f"  time budget spent: {row.label} {kind} run {k + 1} skipped")
                        continue
                    try:
                        r = drain(bench, row, kind, n, cap)
                        runs.setdefault((row.key, kind), []).append(r)
                        rep(f"  run {k + 1}: {row.label:<28} {KIND_TITLE[kind]:<22} start-up {r['startup']:.2f} s, "
                            f"{r['count']:,}/{n:,} in {r['drain_s']:.2f} s from launch ({fmt(r['from_launch'])}/s), "
                            f"steady {fmt(r['steady'])}/s, {r['processes']} process(es) ran jobs; "
                            f"load {os.getloadavg()[0]:.2f}")
                    except Exception as exc:  # one system failing does not stop the others
                        rep(f"  run {k + 1}: {row.label} {kind}: FAILED: {str(exc)[:300]}")
                        runs.setdefault((row.key, kind), []).append({"error": str(exc)[:300]})
        res = {}
        for key, rs in runs.items():
            ok = [r for r in rs if "error" not in r]
            res[key] = summarize(ok) if ok else rs[-1]
        return {"name": name, "server": server.describe(), "results": res}
    finally:
        PROCS.stop_all()
        server.stop()


def write_tables(rep: Report, args, done: list[dict], chosen: list[Row]) -> None:
    for d in done:
        res = d["results"]
        if "io" in args.parts:
            for kind in ("sleep", "async_sleep"):
                rep(f"\n## I/O-bound on {d['name']}: {args.io_n:,} items of a {KIND_TITLE[kind]}, "
                    f"workers totalling 2 OS processes at each system's defaults (medians of {args.runs})")
                rep(io_table(res, [r for r in chosen if kind in r.how_kind], kind))
        if "startup" in args.parts:
            rep(f"\n## Start-up and no-op drain on {d['name']}: {args.noop_n:,} jobs enqueued first "
                f"(bulk where the system can), workers totalling 2 OS processes (medians of {args.runs})")
            rep(startup_table(res, chosen))
    rep("\nstart-up: launch of the workers -> first job started. drain s: launch -> last job finished. "
        "items/s, jobs/s from launch: jobs / drain s (start-up included); steady: while every worker process ran "
        "jobs. queueadmin ×: queueadmin's rate ÷ this row's (> 1: queueadmin faster); reference rows: 1-item "
        "requests in the I/O tables (one job = one request), one request in the no-op table (each peer's bulk "
        "enqueue where it has one). * = stopped by the time cap before every job ran.")


# -- main ----------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer jobs, one run each: a few minutes")
    ap.add_argument("--parts", default="io,startup", help="io, startup (default both)")
    ap.add_argument("--servers", default="debian,embedded", help="debian (Redis 7.0, apt), embedded (6.2)")
    ap.add_argument("--systems", default="qa,qa-one,dramatiq,celery,celery-threads,bullmq,arq,saq",
                    help="rows to run (rq and huey run the no-op part only)")
    ap.add_argument("--runs", type=int, help="runs per row (default 3; 1 with --quick)")
    ap.add_argument("--budget", type=float, help="minutes for the whole run (default 60; 12 with --quick)")
    ap.add_argument("--live", action="store_true", help="run queueadmin's tree in place, not a snapshot copy")
    ap.add_argument("--json", type=Path, help="also write every figure as JSON to this file")
    args = ap.parse_args(argv)
    install_signal_cleanup()
    q = args.quick
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    args.runs = args.runs or (1 if q else 3)
    args.io_n, args.io_cap = (300, 12.0) if q else (1_000, 60.0)
    args.noop_n, args.noop_cap = (10_000, 10.0) if q else (20_000, 30.0)
    budget = Deadline(60 * (args.budget or (12 if q else 60)))
    rep = Report("runtime-quick" if q else "runtime")
    t_start = time.monotonic()
    py, py_arq = install_peers(rep)
    binaries = []
    for s in [x.strip() for x in args.servers.split(",") if x.strip()]:
        if s == "debian":
            found = debian_redis(rep)
            if found:
                binaries.append(found)
        elif s == "embedded":
            binaries.append(None)
    root, measured = (ROOT, tree_line(ROOT)) if args.live else snapshot(ROOT)
    if not args.live:  # byte-compiled as an installed package would be (this shell may set PYTHONDONTWRITEBYTECODE)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(root), str(PEERS)], check=False)
    wanted = [k.strip() for k in args.systems.split(",") if k.strip()]
    chosen = [r for r in rows(py, py_arq, sys.executable, root) if r.key in wanted]
    rep(f"# worker runtime side by side{' (--quick)' if q else ''}: {', '.join(args.parts)}; {args.runs} run(s) each")
    rep(f"# {machine_line()}; load average at start {os.getloadavg()[0]:.2f} (a shared machine adds noise)")
    rep(f"# queueadmin measured: {measured}")
    done = []
    try:
        for binary in binaries:
            done.append(run_server(args, rep, binary, root, chosen, budget))
            write_tables(rep, args, done[-1:], chosen)
        rep("\n# ===== both servers")
        write_tables(rep, args, done, chosen)
    finally:
        PROCS.stop_all()
        data = {"meta": {"quick": q, "runs": args.runs, "io_n": args.io_n, "noop_n": args.noop_n,
                         "machine": machine_line(), "root": measured},
                "servers": [{**d, "results": {f"{k[0]}/{k[1]}": v for k, v in d["results"].items()}} for d in done]}
        text = json.dumps(data, indent=2, default=str) + "\n"
        (OUT / f"{rep.path.stem}.json").write_text(text)
        if args.json:
            args.json.write_text(text)
    rep(f"\n# done in {time.monotonic() - t_start:.0f} s; load average now {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
