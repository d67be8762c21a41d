"""Semantics 2, 3 and 5 with real worker processes: concurrency limits across
processes, SIGKILL at any instant losing nothing (items and tokens), poison
items, graceful and abrupt shutdown, restarts, and a Redis restart."""
import signal
import time

import pytest

from queueadmin.core import embedded
from queueadmin.core.engine.client.queue_client import QueueClient
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.store.connection import connect
from tests.engine_helpers import WorkerProcs, dispatch_is_empty, kill_at_random, max_overlap, wait_for

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def completed(qc, rid):
    return lambda: qc.status(rid)["state"] in ("completed", "failed")


def assert_exactly_one_result_per_item(qc, rid, total):
    results = list(qc.results(rid))
    assert [r["index"] for r in results] == list(range(total))
    assert {r["status"] for r in results} == {"done"}
    # one record per item (its attempts sit beside it, under a:<index>: core/engine/attempts.py)
    assert sum(f.isdigit() for f in qc.redis.hkeys(qc.keys.request(rid).results)) == total
    st = qc.status(rid)
    assert (st["state"], st["done"], st["failed"], st["total"]) == ("completed", total, 0, total)
    return results


def test_concurrency_limit_across_worker_processes(qc, workers):
    a = qc.submit("default", "sleep", [0.05] * 30, concurrency=2)
    b = qc.submit("default", "sleep", [0.04] * 30, concurrency=3)
    for _ in range(3):
        workers.start("default", 1, False, "", "--threads", "1")
    wait_for(completed(qc, a.id), 60)
    wait_for(completed(qc, b.id), 60)
    ra, rb = list(qc.results(a.id)), list(qc.results(b.id))
    assert max_overlap(ra) == 2 and 2 <= max_overlap(rb) <= 3  # 3 slots for 5 tokens: b rarely gets all 3
    assert len({r["worker"] for r in ra + rb}) == 3  # really spread over the processes


def test_concurrency_limit_across_threads_and_processes(qc, workers):
    """Two processes of 8 threads: each request's limit holds across all of
    them, while the other request's items overlap up to its own limit."""
    a = qc.submit("default", "sleep", [0.05] * 40, concurrency=3)
    b = qc.submit("default", "async_sleep", [0.05] * 40, concurrency=5)
    workers.start("default", 2)
    wait_for(completed(qc, a.id), 60)
    wait_for(completed(qc, b.id), 60)
    ra, rb = list(qc.results(a.id)), list(qc.results(b.id))
    assert max_overlap(ra) == 3 and max_overlap(rb) == 5
    assert len(ra) == len(rb) == 40 and all(r["attempts"] == 1 for r in ra + rb)


def test_sigkill_mid_item_loses_no_item_and_no_token(qc, workers):
    qc.define_queue("crash", QueueConfig(lease_seconds=3))
    # long enough (about 3 s of work) that each victim is seen running an item before the request ends
    sub = qc.submit("crash", "sleep", [0.08] * 240, concurrency=6)
    procs = [workers.start("crash") for _ in range(3)]
    wait_for(lambda: qc.status(sub.id)["done"] >= 40, 60)
    # a worker that joined late may hold no token (the others take theirs back as
    # they return them): kill one that reports an item running, in the middle of it
    first = wait_for(lambda: _one_running(qc, procs), 30, interval=0.002)
    workers.kill(first)
    wait_for(lambda: qc.status(sub.id)["done"] >= 120, 60)
    second = wait_for(lambda: _one_running(qc, [p for p in procs if p is not first]), 30, interval=0.002)
    workers.kill(second)
    workers.start("crash")
    wait_for(completed(qc, sub.id), 90, message=workers.logs())
    assert_exactly_one_result_per_item(qc, sub.id, 240)  # the killed workers' items ran again elsewhere
    assert dispatch_is_empty(qc, "crash")


def _one_running(qc, procs):
    """One of these worker processes that reports an item running right now, or None."""
    return next((p for p in procs if _running_in(qc, p.pid)), None)


def _running_in(qc, pid: int) -> bool:
    """The worker process `pid` reports an item running right now."""
    for wid in qc.redis.zrange(qc.keys.workers, 0, -1):
        info = qc.redis.hmget(qc.keys.worker(wid), "pid", "current")
        if info[0] == str(pid) and info[1] not in (None, "", "[]"):
            return True
    return False


def test_sigkill_at_random_instants_many_times(qc, workers):
    qc.define_queue("crash", QueueConfig(lease_seconds=2))
    sub = qc.submit("crash", "echo", list(range(1500)), concurrency=4)
    kill_at_random(workers, "crash", seed=7, kills=6, low=0.2, high=0.6)
    wait_for(completed(qc, sub.id), 90, message=workers.logs())
    assert_exactly_one_result_per_item(qc, sub.id, 1500)
    assert dispatch_is_empty(qc, "crash")


def test_a_poison_item_that_kills_its_worker_ends_in_the_dead_letters(qc, workers):
    qc.define_queue("poison", QueueConfig(lease_seconds=1, max_attempts=2))
    sub = qc.submit("poison", "crash", ["boom"])
    good = qc.submit("poison", "echo", ["fine"])
    workers.start("poison", processes=2)  # the pool restarts killed children
    wait_for(completed(qc, sub.id), 60, message=workers.logs())
    st = qc.status(sub.id)
    assert (st["state"], st["failed"], st["dead"]) == ("failed", 1, 1)
    (dead,) = qc.dead_letters(sub.id)
    assert "lease expired" in dead["error"] and dead["attempts"] == 2
    wait_for(completed(qc, good.id), 30)


def test_sigterm_finishes_the_held_item_then_exits_0(qc, workers):
    sub = qc.submit("default", "sleep", [1.5])
    proc = workers.start()
    wait_for(lambda: qc.status(sub.id)["in_flight"] == 1, 30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    (rec,) = list(qc.results(sub.id))
    assert rec["status"] == "done" and rec["attempts"] == 1


def test_a_second_signal_releases_held_work_at_once(qc, workers):
    sub = qc.submit("default", "sleep", [5])
    proc = workers.start()
    wait_for(lambda: qc.status(sub.id)["in_flight"] == 1, 30)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 0
    assert time.monotonic() - t0 < 3
    assert qc.status(sub.id)["done"] == 0
    workers.start()
    wait_for(completed(qc, sub.id), 30)
    (rec,) = list(qc.results(sub.id))
    assert rec["status"] == "done" and rec["attempts"] == 2


def test_a_restarted_worker_releases_what_its_dead_predecessor_held(qc, workers):
    """Leases of a minute and slow death detection: only the restart can bring
    the item back quickly, by finding its predecessor's process gone."""
    workers.env["QUEUEADMIN_DEAD_AFTER_SECONDS"] = "60"
    qc.define_queue("slow", QueueConfig(lease_seconds=60))
    sub = qc.submit("slow", "sleep", [1.0])
    proc = workers.start("slow")
    wait_for(lambda: qc.status(sub.id)["in_flight"] == 1, 30)
    workers.kill(proc)
    proc.wait(5)
    t0 = time.monotonic()
    workers.start("slow")
    wait_for(completed(qc, sub.id), 30, message=workers.logs())
    assert time.monotonic() - t0 < 15
    (rec,) = list(qc.results(sub.id))
    assert rec["attempts"] == 2


def test_workers_ride_out_a_redis_restart(worker_db, tmp_path):
    port = embedded.free_port()
    data = tmp_path / "redis"
    server = embedded.start(port, data)
    url = f"redis://127.0.0.1:{port}/0"
    procs = WorkerProcs(url, worker_db, tmp_path)
    try:
        qc = QueueClient(connect(url))
        qc.define_queue("default", QueueConfig())
        sub = qc.submit("default", "sleep", [0.01] * 600, concurrency=4)
        procs.start()
        procs.start()
        wait_for(lambda: qc.status(sub.id)["done"] >= 100, 60)
        embedded.stop(server)  # a clean shutdown writes the AOF
        time.sleep(1.5)
        server = embedded.start(port, data)
        wait_for(completed(qc, sub.id), 90, message=procs.logs())
        assert_exactly_one_result_per_item(qc, sub.id, 600)
        logs = procs.logs()
        assert "cannot reach Redis" in logs or "Redis is loading" in logs  # the backoff's one-line reason
        assert all(p.poll() is None for p in procs.procs)  # they carried on
    finally:
        procs.stop_all()
        embedded.stop(server)
