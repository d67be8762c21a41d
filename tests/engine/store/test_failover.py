"""A master dies mid-run (the master of the queue's dispatch slot, or one
holding only requests): its replica is promoted, the workers reconnect and
finish the run by themselves. Redis replicates asynchronously, so writes the
dead master acknowledged but had not yet sent to its replica are gone: the
test counts what that did to the run (items run twice, items without a
result, requests that never finished), without and with WAIT_REPLICAS=1.

Run with -s to see the counts (also written to failover-<mode>.json in the
test's tmp dir)."""
from __future__ import annotations

import collections
import json
import time

import pytest

from queueadmin.core.engine.client.queue_client import QueueClient
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.store.connection import RETRYABLE, connect
from tests.cluster_harness import LocalCluster
from tests.engine_helpers import TEST_PROCESSORS, WorkerProcs

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

REQUESTS, ITEMS = 30, 100  # 3000 items, the requests spread over the three masters
WORKERS = 4


def retrying(fn, timeout=60.0):
    """Call fn until the cluster answers (a failover may be under way)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except RETRYABLE:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run_failover(tmp_path, worker_db, wait_replicas: int = 0, victim: str = "dispatch") -> dict:
    """victim: "dispatch" kills the master of the queue's slot (it also holds
    some requests), "requests" a master that holds only requests."""
    log_dir = tmp_path / "exec"
    log_dir.mkdir()
    with LocalCluster(tmp_path / "cluster") as cluster:
        client = connect(cluster.url, wait_replicas=(wait_replicas, 1000))
        qc = QueueClient(client)
        qc.define_queue("failover", QueueConfig(lease_seconds=3, backoff_seconds=0.1, max_attempts=10))
        subs = [qc.submit("failover", "logged", [f"{k}:{i}" for i in range(ITEMS)], concurrency=4)
                for k in range(REQUESTS)]
        dispatch = client.get_node_from_key(qc.keys.queue("failover").tokens).port
        killed = dispatch if victim == "dispatch" else next(p for p in cluster.masters() if p != dispatch)
        request_masters = collections.Counter(client.get_node_from_key(qc.keys.request(s.id).meta).port
                                              for s in subs)
        procs = WorkerProcs(cluster.url, worker_db, tmp_path, QA_EXEC_LOG=str(log_dir),
                            QUEUEADMIN_EXTRA_PROCESSORS=json.dumps({**TEST_PROCESSORS,
                                                                    "logged": "tests.cluster_processors.logged"}),
                            QUEUEADMIN_DEAD_AFTER_SECONDS="10",
                            QUEUEADMIN_WAIT_REPLICAS=str(wait_replicas))
        total = REQUESTS * ITEMS

        def done() -> int:
            return sum((st or {}).get("done", 0) for st in qc.statuses([s.id for s in subs]))

        try:
            workers = [procs.start("failover") for _ in range(WORKERS)]
            deadline = time.monotonic() + 60
            while done() < total // 4:
                assert time.monotonic() < deadline, procs.logs()
                time.sleep(0.05)
            done_at_kill = done()
            replica = cluster.replica_of(killed)
            killed_at = time.monotonic()
            cluster.kill(killed)  # SIGKILL, mid-run
            cluster.wait_failover(killed, 30)  # its replica takes over
            promoted_after = time.monotonic() - killed_at
            assert replica in cluster.masters()

            finished, states = None, {}
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                sts = retrying(lambda: qc.statuses([s.id for s in subs]))
                states = collections.Counter((st or {}).get("state", "vanished") for st in sts)
                if states.get("completed", 0) == REQUESTS:
                    finished = time.monotonic() - killed_at
                    break
                time.sleep(0.2)
            alive = sum(p.poll() is None for p in workers)
        finally:
            procs.stop_all()

        runs = collections.Counter()
        for path in log_dir.glob("*.log"):
            runs.update(path.read_text().split())
        results = {}
        for s in subs:
            st = retrying(lambda: qc.status(s.id))
            if st is None:
                continue
            for rec in retrying(lambda: list(qc.results(s.id))):
                results[f"{subs.index(s)}:{rec['index']}"] = rec
        items = [f"{k}:{i}" for k in range(REQUESTS) for i in range(ITEMS)]
        report = {
            "wait_replicas": wait_replicas, "items": total, "workers": WORKERS,
            "requests_per_master": dict(request_masters), "killed": victim, "killed_master": killed,
            "dispatch_master": dispatch, "promoted_replica": replica,
            "done_when_killed": done_at_kill, "promoted_after_s": round(promoted_after, 2),
            "finished_after_kill_s": round(finished, 2) if finished else None,
            "request_states": dict(states), "workers_alive": alive,
            "lost_items": sum(1 for i in items if results.get(i, {}).get("status") != "done"),
            "items_run_twice_or_more": sum(1 for i in items if runs[i] > 1),
            "extra_runs": sum(max(0, runs[i] - 1) for i in items),
            "never_run": sum(1 for i in items if runs[i] == 0),
            "results_with_attempts_gt_1": sum(1 for r in results.values() if r.get("attempts", 1) > 1),
        }
        report["stuck"] = [_stuck_state(qc, s.id) for s in subs
                           if (retrying(lambda: qc.status(s.id)) or {}).get("state") != "completed"]
        (tmp_path / f"failover-{victim}-{'wait' if wait_replicas else 'async'}.json").write_text(
            json.dumps(report, indent=1))
        print("\nfailover:", json.dumps(report))
        report["logs"] = procs.logs()
        return report


def _stuck_state(qc, rid) -> dict:
    """Where a request that did not finish stands: its tokens and items."""
    r, qk, rk = qc.redis, qc.keys.queue("failover"), qc.keys.request(rid)
    tokens = {t: "waiting" for t in r.zrange(qk.tokens, 0, -1) if t.startswith(rid)}
    tokens.update({t: f"held by {w}" for t, w in r.hgetall(qk.held).items() if t.startswith(rid)})
    tokens.update({t: "parked" for t in r.zrange(qk.parked, 0, -1) if t.startswith(rid)})
    status = qc.status(rid) or {}
    return {"id": rid, "status": {k: status.get(k) for k in ("state", "total", "done", "failed", "in_flight")},
            "reqs": r.hget(qk.reqs, rid), "tokens": tokens,
            "leases": r.zrange(rk.leases, 0, -1, withscores=True),
            "pending": [(p["message_id"], p["consumer"], p["times_delivered"])
                        for p in r.xpending_range(rk.items, "g", "-", "+", 100)]}


@pytest.mark.parametrize("victim, wait_replicas", [("dispatch", 0), ("dispatch", 1), ("requests", 0)],
                         ids=["dispatch-master-async", "dispatch-master-wait1", "requests-master-async"])
def test_a_master_dies_mid_run_and_the_workers_finish_the_run(tmp_path, worker_db, victim, wait_replicas):
    report = run_failover(tmp_path, worker_db, wait_replicas, victim)
    assert report["finished_after_kill_s"] is not None, report["logs"][-6000:]  # every request completed, nobody restarted
    assert report["workers_alive"] == WORKERS
    assert report["lost_items"] == 0 and report["never_run"] == 0
    assert report["request_states"] == {"completed": REQUESTS}
    # they did see the failover: a connection refused, or a lease the promoted replica did not have
    assert any(sign in report["logs"] for sign in ("redis unavailable", "cannot", "failed over")), report["logs"][-3000:]
