"""The schedule sharded over several keys/slots (core/engine/schedule.py):
far-off requests wait in shard zsets and are moved to their queue's `sched`
when near; moving is idempotent and crash-safe, and a request still starts
once, no earlier than its time. Runs on a single server and on the cluster."""
import threading
import time

import pytest

from queueadmin.core.engine.features import schedule
from tests.engine_helpers import burst, dispatch_is_empty

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def short(monkeypatch):
    """Shrink the horizon: delays over 0.4 s are far off, moved 0.2 s before their time."""
    monkeypatch.setattr(schedule, "HORIZON_MS", 200)
    monkeypatch.setattr(schedule, "FAR_MS", 400)


def in_shard(qc, queue, rid):
    return qc.redis.zscore(qc.keys.queue(queue).sched_shard(schedule.shard_of(rid)), rid)


def test_a_far_off_request_waits_in_a_shard_then_runs_on_time(qc, short):
    sub = qc.submit("default", "echo", ["x"], delay=0.8, concurrency=3)
    qk = qc.keys.queue("default")
    assert sub.scheduled and in_shard(qc, "default", sub.id) is not None
    assert qc.redis.zscore(qk.sched, sub.id) is None  # not in the dispatch slot's schedule
    assert qc.live_requests("default")[sub.id]["scheduled"]  # but registered (dedup, priority changes)
    assert [rid for rid, _ in schedule.entries(qc, "default")] == [sub.id]
    burst(qc)
    assert qc.status(sub.id)["done"] == 0 and in_shard(qc, "default", sub.id) is not None  # not near yet
    time.sleep(0.65)  # within the horizon now
    burst(qc)  # its upkeep moves it to `sched`, then promotes it when due
    st = qc.status(sub.id)
    (rec,) = list(qc.results(sub.id))
    assert st["state"] == "completed" and rec["attempts"] == 1
    assert rec["started_at"] >= st["not_before"] - 0.002
    assert in_shard(qc, "default", sub.id) is None
    assert dispatch_is_empty(qc)


def test_the_shards_spread_over_the_masters(qc, backend):
    keys = schedule.shard_keys(qc, "default")
    assert len(keys) == schedule.SHARDS and len({k.split("}")[0] for k in keys}) == schedule.SHARDS
    if backend == "cluster":
        assert len({qc.redis.get_node_from_key(k).name for k in keys}) == 3


def test_moving_twice_or_after_a_crash_starts_nothing_twice(qc, short):
    sub = qc.submit("default", "echo", ["x"] * 5, delay=0.5, concurrency=4)
    qk = qc.keys.queue("default")
    k = schedule.shard_of(sub.id)
    # a mover that died after sched_move, before removing the shard entry
    ready = int(qc.status(sub.id)["not_before"] * 1000)
    assert qc.scripts("sched_move", [qk.reqs, qk.sched], [sub.id, ready]) == [1]
    assert in_shard(qc, "default", sub.id) is not None
    # everyone moves it again, over and over, concurrently
    now = ready  # as if the time had come
    threads = [threading.Thread(target=lambda: [schedule.move(qc, "default", [k], now_ms=now) for _ in range(20)])
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert in_shard(qc, "default", sub.id) is None and qc.redis.zscore(qk.sched, sub.id) == ready
    time.sleep(max(0, ready / 1000 - time.time()) + 0.05)
    burst(qc)
    assert qc.status(sub.id)["state"] == "completed"
    assert [r["attempts"] for r in qc.results(sub.id)] == [1] * 5
    # a stale shard entry of a request that already ran is dropped, never put back
    qc.redis.zadd(qk.sched_shard(k), {sub.id: ready})
    assert schedule.move(qc, "default", [k], now_ms=now) == 0
    assert in_shard(qc, "default", sub.id) is None and qc.redis.zscore(qk.sched, sub.id) is None


def test_an_entry_written_before_its_request_exists_waits_for_it(qc, short):
    """A producer writes the shard entry first; while its request is not yet
    registered the entry stays (it is dropped only long after its time)."""
    qk = qc.keys.queue("default")
    k = schedule.shard_of("ghost")
    now = int(time.time() * 1000)
    qc.redis.zadd(qk.sched_shard(k), {"ghost": now})
    qc.redis.hset(qc.keys.request("ghost").meta, mapping={"state": "scheduled"})  # created, not yet enqueued
    assert schedule.move(qc, "default", [k], now_ms=now) == 0
    assert in_shard(qc, "default", "ghost") is not None
    schedule.move(qc, "default", [k], now_ms=now + schedule.ORPHAN_MS + 1)  # never registered: given up
    assert in_shard(qc, "default", "ghost") is None


def test_cancelled_and_duplicate_far_off_requests_leave_no_entries(qc, short):
    a = qc.submit("default", "echo", ["same"], delay=0.5)
    b = qc.submit("default", "echo", ["same"], delay=0.5)
    assert b.duplicate and b.id == a.id
    c = qc.submit("default", "echo", ["other"], delay=0.5)
    qc.cancel(c.id)
    time.sleep(0.35)
    for k in range(schedule.SHARDS):
        schedule.move(qc, "default", [k])
    assert sum(qc.redis.zcard(key) for key in schedule.shard_keys(qc, "default")) == 0
    assert [rid for rid, _ in schedule.entries(qc, "default")] == [a.id]
    time.sleep(0.2)
    burst(qc)
    assert qc.status(a.id)["state"] == "completed" and qc.status(c.id)["state"] == "cancelled"


def test_run_now_and_priority_changes_reach_a_far_off_request(qc):
    sub = qc.submit("default", "echo", ["x"], delay=3600, priority=20)
    assert in_shard(qc, "default", sub.id) is not None
    qc.set_priority(sub.id, 70)
    assert qc.run_now("default", sub.id)
    burst(qc)
    st = qc.status(sub.id)
    assert (st["state"], st["priority"]) == ("completed", 70)
    assert not qc.run_now("default", sub.id)


def test_the_dashboard_lists_near_and_far_off_requests(qc):
    from queueadmin.core import queries

    near = qc.submit("default", "echo", ["near"], delay=30)
    far = qc.submit("default", "echo", ["far"], delay=3600)
    gone = qc.submit("default", "echo", ["gone"], delay=7200)
    qc.cancel(gone.id)
    rows = queries.scheduled("default")
    assert [row["request"] for row in rows] == [near.id, far.id]
    assert rows[1]["start_at"] == pytest.approx(time.time() + 3600, abs=5)
