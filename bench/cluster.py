#!/usr/bin/env python
"""queueadmin on Redis Cluster versus one server, in the same run. Not a test.

    .venv/bin/python bench/cluster.py [--quick] [--json out.json] [--workers-for-load 8]

Starts, on free 127.0.0.1 ports, one redis-server and a cluster of six
(3 masters, 3 replicas; tests/cluster_harness.py), all with AOF on
(appendfsync everysec), and measures on each backend:

  * end-to-end: 2 idle worker processes (`queue_worker --processes 2`), one
    request of 20,000 echo items submitted, until it is completed;
  * spread: 100 requests of 200 echo items queued, then 2 burst worker
    processes drain them (the requests' keys spread over the masters);
  * submit: 2,000 one-item requests from one producer;

and the same three on the cluster with WAIT_REPLICAS=1 (every write round
trip waits until a replica has it). Then the dispatch-slot question: N worker
processes drain one queue on the cluster; the CPU each master spent
(INFO cpu) and the commands it ran (INFO stats) show whether the master of
the queue's `{q:...}` slot is the bottleneck.

Ends only the processes it started (the cluster's nodes by pid, workers by
their process group).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import PROCS, ROOT, Deadline, RedisServer, Report, fmt, install_signal_cleanup, machine_line, table, tree_line  # noqa: E402
from qa import QUEUE, QA, drain, rate_from_records  # noqa: E402

sys.path.insert(0, str(ROOT))
from tests.cluster_harness import LocalCluster  # noqa: E402


class ClusterServer:
    """What bench/qa.py expects of a server (flushall, `r.info("cpu")`), for a
    cluster: CPU summed over its masters."""

    def __init__(self, cluster: LocalCluster):
        self.cluster, self.r = cluster, self

    def flushall(self) -> None:
        self.cluster.flushall()

    def info(self, section: str) -> dict:
        assert section == "cpu"
        total = {"used_cpu_user": 0.0, "used_cpu_sys": 0.0}
        for port in self.cluster.masters():
            with self.cluster.node(port) as c:
                cpu = c.info("cpu")
            for k in total:
                total[k] += float(cpu[k])
        return total


def e2e(qa: QA, server, n: int) -> dict:
    server.flushall()
    qa.define()
    proc = qa.workers(2)
    warm = qa.submit(["warm"] * 20)
    qa.wait_done([warm], 20, Deadline(120), poll=0.05)
    time.sleep(1.0)
    t0 = time.time()
    rid = qa.submit([f"item-{i:07d}" for i in range(n)])
    done = qa.wait_done([rid], n, Deadline(900), poll=0.05)
    t1 = time.time()
    PROCS.stop(proc, timeout=30)
    st = qa.client.status(rid)
    end = st["finished_at"] or t1
    steady = rate_from_records(qa.records([rid]))
    return {"items": n, "done": done, "seconds": end - t0, "rate": done / (end - t0), "steady": steady["rate"]}


def submit_rate(qa: QA, server, n: int) -> dict:
    server.flushall()
    qa.define()
    t0 = time.perf_counter()
    for i in range(n):
        qa.submit([f"item-{i:07d}"])
    dt = time.perf_counter() - t0
    return {"requests": n, "seconds": dt, "rate": n / dt, "us_each": dt * 1e6 / n}


def node_stats(cluster: LocalCluster) -> dict[int, tuple[float, int]]:
    out = {}
    for port in cluster.masters():
        with cluster.node(port) as c:
            cpu, stats = c.info("cpu"), c.info("stats")
        out[port] = (float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]), int(stats["total_commands_processed"]))
    return out


def dispatch_load(qa: QA, cluster: LocalCluster, processes: int, requests: int, items: int) -> dict:
    """N burst workers drain `requests` x `items`; per-master CPU and commands."""
    cluster.flushall()
    qa.define()
    rids = [qa.submit(range(k * 1_000_000, k * 1_000_000 + items)) for k in range(requests)]
    dispatch = qa.redis.get_node_from_key(qa.client.keys.queue(QUEUE).tokens).port
    before, t0 = node_stats(cluster), time.time()
    proc = qa.workers(processes, burst=True)
    done = qa.wait_done(rids, requests * items, Deadline(900), poll=0.5)
    wall = time.time() - t0
    after = node_stats(cluster)
    if proc.poll() is None:
        PROCS.stop(proc, timeout=30)
    steady = rate_from_records(qa.records(rids))
    nodes = {}
    for port in after:
        cpu = (after[port][0] - before.get(port, (0, 0))[0]) / wall
        cmds = (after[port][1] - before.get(port, (0, 0))[1]) / wall
        nodes[port] = {"cpu": cpu, "commands_per_s": cmds, "dispatch": port == dispatch}
    return {"processes": processes, "items": requests * items, "done": done, "wall": wall,
            "rate": steady["rate"], "nodes": nodes}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    ap.add_argument("--workers-for-load", type=int, default=8, help="worker processes of the dispatch-load step")
    args = ap.parse_args(argv)
    install_signal_cleanup()
    q = args.quick
    n_e2e = 2_000 if q else 20_000
    spread = (20, 100) if q else (100, 200)
    n_submit = 300 if q else 2_000
    load = (30, 100) if q else (100, 400)

    rep = Report("cluster-quick" if q else "cluster")
    rep(f"# queueadmin on Redis Cluster vs one server{' (--quick)' if q else ''}")
    rep(f"# {machine_line()}")
    rep(f"# measured: {tree_line(ROOT)}; load average at start {os.getloadavg()[0]:.2f}")
    server = RedisServer(appendonly=True)
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="qa-bench-cluster-"))).start()
    rep(f"# redis-server {server.version}, AOF everysec: one server on {server.port}; cluster of 3 masters + "
        f"3 replicas on {','.join(map(str, cluster.ports))}; workers: `manage.py queue_worker --processes N`")
    rows, data = [], rep.data
    data["meta"] = {"quick": q, "redis": server.version, "machine": machine_line(), "root": tree_line(ROOT)}
    try:
        as_server = ClusterServer(cluster)
        backends = [("single server", QA(server.url), server, 0), ("cluster, 3 masters", QA(cluster.url), as_server, 0),
                    ("cluster + WAIT 1", QA(cluster.url), as_server, 1)]
        for _, qa, _, wait in backends:
            qa.migrate()
            if wait:
                qa.env["QUEUEADMIN_WAIT_REPLICAS"] = "1"
                qa.client.redis.wait_replicas = (1, 1000)
        for name, qa, srv, wait in backends:
            res = {"e2e": e2e(qa, srv, n_e2e)}
            res["spread"] = drain(qa, srv, [(spread[1], 50)] * spread[0], timeout=900)
            res["submit"] = submit_rate(qa, srv, n_submit)
            data[name] = res
            sp = res["spread"]
            rows.append([name, fmt(res["e2e"]["rate"]), fmt(res["e2e"]["steady"]), fmt(sp["rate"]),
                         fmt(sp.get("worker_us")), fmt(sp.get("redis_us")),
                         fmt(res["submit"]["rate"]), f"{res['submit']['us_each']:.0f}"])
            rep(f"  {name}: e2e {fmt(res['e2e']['rate'])}/s (steady {fmt(res['e2e']['steady'])}/s), "
                f"spread {fmt(res['spread']['rate'])}/s, submit {fmt(res['submit']['rate'])} req/s")
        rep("")
        rep(table(["backend", f"e2e items/s ({n_e2e:,}, 1 request)", "steady items/s",
                   f"drain items/s ({spread[0]} requests)", "worker CPU µs/item", "Redis CPU µs/item",
                   "submit req/s", "µs/submit"], rows, "lrrrrrrr"))
        rep("# CPU per item (drain): worker processes' CPU and redis-server's (all masters) per item done,"
            " which depends less than a rate on what else the machine runs")

        qa = backends[1][1]
        res = dispatch_load(qa, cluster, args.workers_for_load, *load)
        data["dispatch_load"] = res
        rep(f"\n# dispatch load: {args.workers_for_load} worker processes drain {res['items']:,} items "
            f"({load[0]} requests) on the cluster: {fmt(res['rate'])} items/s")
        lrows = [[("dispatch " if v["dispatch"] else "") + f"master :{port}", f"{v['cpu'] * 100:.0f}%",
                  fmt(v["commands_per_s"])] for port, v in sorted(res["nodes"].items())]
        rep(table(["node", "CPU (of one core)", "commands/s"], lrows, "lrr"))
        disp = next((v for v in res["nodes"].values() if v["dispatch"]), None)
        if disp and res["rate"]:
            per_item = disp["cpu"] / res["rate"]  # dispatch-master CPU seconds per item (wall-averaged)
            res["dispatch_us_per_item"] = per_item * 1e6
            rep(f"# the dispatch master spent {per_item * 1e6:.1f} µs of CPU per item: one queue's slot saturates "
                f"near {fmt(1 / per_item if per_item else None)} items/s, vs {fmt(res['rate'])} items/s the "
                f"workers reached here")
    finally:
        PROCS.stop_all()
        cluster.stop()
        server.stop()
    rep(f"\n# load average at the end {os.getloadavg()[0]:.2f} (a shared machine: other processes add noise)")
    rep.dump_json(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
