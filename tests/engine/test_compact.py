"""The compact meta (store/packed.py SHORT, lua/_request.lua): a one-item
request waiting unindexed keeps its creation time, queue and processor under
one-letter names, and leaves out a priority and concurrency it implies.
Every reader sees it as the full layout, and its first take or cancel writes
the full names. A producer makes it only while every worker of the queue
reads it. Runs on a single server and on a cluster."""
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.store import packed
from tests.engine.test_oneitem import claim
from tests.engine_helpers import burst, dispatch_is_empty

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)

pytestmark = pytest.mark.timeout(120)

OLD = "\n".join(m for m in packed.WORKER_MARKS if m != packed.COMPACT_MARK)  # a worker of the release before
UNSTABLE = {"id", "created_at", "started_at", "p"}  # differ between two requests made alike


def raw(qc, rid) -> dict:
    return qc.redis.hgetall(qc.keys.request(rid).meta)


def submit(qc, compact: bool, queue="default", processor="echo", payload="x", **kw):
    """A one-item request, compact or, with a worker of the release before
    serving the queue, in the full names."""
    can = qc.keys.queue(queue).can
    if compact:
        qc.redis.hdel(can, "old:1:aa")
    else:
        qc.redis.hset(can, "old:1:aa", f"\n{processor}\n{OLD}\n")
    qc.submission.gate.forget()
    try:
        return qc.submit(queue, processor, [payload], dedup=False, **kw).id
    finally:
        qc.redis.hdel(can, "old:1:aa")
        qc.submission.gate.forget()


def take(qc, rid, worker="w1"):
    cfg = qc.queue_config(qc.reads.meta(rid)["queue"])
    return qc.scripts("take", qc.keys.request(rid).all(), [worker, cfg.lease_ms, cfg.max_attempts,
                                                           cfg.retention_ms, "", 1])


def alike(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k not in UNSTABLE}


def test_a_request_waiting_unindexed_has_the_compact_meta_and_reads_as_the_full_one(qc):
    qk = qc.keys.queue("default")
    plain = submit(qc, True)
    assert set(raw(qc, plain)) == {"c", "q", "f", "p"}  # in the lane: priority 50, concurrency 10 implied
    assert qc.redis.llen(qk.lane) == 1
    other = submit(qc, True, priority=70, concurrency=3, dedup_key=None)
    keyed = qc.submit("default", "echo", ["k"], dedup_key="k-1").id  # a token: the de-dup key keeps it out of the lane
    assert set(raw(qc, other)) == {"c", "q", "f", "p", "priority", "concurrency"}
    assert set(raw(qc, keyed)) == {"c", "q", "f", "p", "dedup_key"}
    twin = submit(qc, False)
    assert {"created_at", "queue", "processor", "priority", "concurrency"} <= set(raw(qc, twin))
    assert alike(qc.reads.meta(plain)) == alike(qc.reads.meta(twin))
    assert qc.reads.meta(plain)["created_at"] == raw(qc, plain)["c"]
    assert {k: v for k, v in qc.status(plain).items() if k not in ("id", "created_at")} == {
        k: v for k, v in qc.status(twin).items() if k not in ("id", "created_at")}
    assert qc.status(other)["priority"] == 70 and qc.status(other)["concurrency"] == 3
    live = qc.live_requests("default")
    assert live[plain] == live[twin] == {"priority": 50, "concurrency": 10, "scheduled": False}
    assert live[other] == {"priority": 70, "concurrency": 3, "scheduled": False}
    assert qc.reads.lean_item(plain)["e"] == raw(qc, plain)["c"] + "-0"
    assert packed.oldest_waiting(qc.redis, qc.keys, "default", [50]) == int(raw(qc, plain)["c"])


UNIQUE = itertools.count()  # de-dup keys of one example never meet an earlier one's


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(priority=st.integers(0, 99), concurrency=st.integers(1, 12),
       processor=st.sampled_from(["echo", "sleep", "fail"]), time_limit=st.one_of(st.none(), st.integers(1, 600)),
       dedup_key=st.one_of(st.none(), st.text("abc", min_size=1, max_size=3)))
def test_a_compact_request_reads_takes_and_unpacks_exactly_as_the_full_one(qc, priority, concurrency, processor,
                                                                          time_limit, dedup_key):
    """Made alike, a compact request and one in the full names read the same
    to every reader, give the same take, and leave the same meta hash."""
    terms = dict(priority=priority, concurrency=concurrency, time_limit=time_limit)
    rids = []
    for compact in (True, False):
        key = None if dedup_key is None else f"{dedup_key}-{compact}-{next(UNIQUE)}"
        rids.append(submit(qc, compact, processor=processor, payload=[priority], dedup_key=key, **terms))
    compact, full = rids
    assert "q" in raw(qc, compact) and "q" not in raw(qc, full)
    assert alike(qc.reads.meta(compact)) == {**alike(qc.reads.meta(full)), "dedup_key": qc.reads.meta(compact)[
        "dedup_key"]}
    got = [take(qc, rid) for rid in rids]
    assert got[0][2:7] == got[1][2:7] and got[0][2] == processor and int(got[0][5]) == priority
    assert [qc.redis.hgetall(qc.keys.request(rid).items)["p"] for rid in rids] == [f"[{priority}]"] * 2
    metas = [raw(qc, rid) for rid in rids]
    assert not {"c", "q", "f", "p"} & set(metas[0])
    assert set(metas[0]) == set(metas[1])
    assert {k: v for k, v in alike(metas[0]).items() if k != "dedup_key"} == {
        k: v for k, v in alike(metas[1]).items() if k != "dedup_key"}


def test_a_priority_or_concurrency_change_is_written_beside_the_short_names(qc):
    qk = qc.keys.queue("default")
    a, b = submit(qc, True, payload="a"), submit(qc, True, payload="b")
    qc.set_priority(b, 80)
    qc.set_concurrency(a, 4)
    assert raw(qc, b)["priority"] == "80" and "q" in raw(qc, b)
    assert (qc.status(b)["priority"], qc.status(a)["concurrency"], qc.status(a)["priority"]) == (80, 4, 50)
    assert [t for t, _ in packed.lane_waiting(qc.redis, qk)] == [f"{a}#1"]  # b left the lane for a token of band 80
    assert claim(qc, "default", "w1", 2) == [f"{b}#1", f"{a}#1"]
    assert take(qc, b)[2:7] == ["echo", "", "", 80, 1]
    assert raw(qc, a)["concurrency"] == "4"
    took = take(qc, a)
    assert took[5] == 50 and raw(qc, a)["priority"] == "50" and raw(qc, a)["concurrency"] == "4"


def test_a_cancelled_compact_request_ends_with_the_full_names(qc):
    rid = submit(qc, True)
    qc.cancel(rid)
    meta = raw(qc, rid)
    assert not {"c", "q", "f", "p"} & set(meta)
    assert (meta["queue"], meta["processor"], meta["priority"], meta["concurrency"], meta["state"]) == (
        "default", "echo", "50", "10", "cancelled")
    assert [r["status"] for r in qc.results(rid)] == ["cancelled"]
    assert dispatch_is_empty(qc)


def test_a_queue_with_another_default_concurrency_keeps_it_in_the_meta(qc):
    qc.define_queue("five", QueueConfig(concurrency=5))
    rid = submit(qc, True, queue="five")
    assert set(raw(qc, rid)) == {"c", "q", "f", "p", "concurrency"} and raw(qc, rid)["concurrency"] == "5"
    assert qc.status(rid)["concurrency"] == 5
    burst(qc, queues=("five",))
    assert [r["result"] for r in qc.results(rid)] == ["x"] and raw(qc, rid)["concurrency"] == "5"
    assert dispatch_is_empty(qc, "five")
