"""Items a worker cannot run go to a worker that can (core/engine/routing.py,
abilities.py, lua/untake-3.lua): in-process workers with different
processor maps. The one that lacks a processor gives its items back
untouched and passes over them; the one that has it runs them; with none
live for longer than the queue allows, they fail with that reason and the
retry policy applies. Runs on a single server and on a cluster."""
import json
import threading
import time

import pytest

from queueadmin.core.engine.runtime import abilities
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.runtime.processors import Catalog, Processors
from queueadmin.core.engine.runtime.worker import Worker
from queueadmin.core.engine.store import packed
from tests.engine_helpers import BUILTIN, wait_for

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)

pytestmark = pytest.mark.timeout(120)

WITH_SHOUT = {**BUILTIN, "shout": BUILTIN["uppercase"]}  # "shout" only where a worker has it


def make_worker(qc, processors, queues=("default",), **kwargs) -> Worker:
    """A worker whose processors are `processors` alone (no catalog, no tasks)."""
    kwargs.setdefault("threads", 2)
    return Worker(qc, list(queues), Processors(processors, catalog=Catalog()), install_signals=False,
                  heartbeat=0.2, dead_after=1.5, **kwargs)


def run_burst(qc, processors, queues=("default",)) -> Worker:
    w = make_worker(qc, processors, queues, burst=True)
    w.work()
    return w


class Running:
    """A worker running on a thread until the block ends."""

    def __init__(self, worker: Worker):
        self.worker = worker
        self.thread = threading.Thread(target=worker.work, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self.worker

    def __exit__(self, *exc):
        self.worker.stop()
        self.thread.join(20)
        assert not self.thread.is_alive()


def deliveries(qc, rid) -> list[int]:
    """Deliveries counted for each item of a request not yet acknowledged."""
    items = qc.keys.request(rid).items
    if qc.redis.type(items) == "hash":
        return [int(qc.redis.hget(items, "d"))]
    return [p["times_delivered"] for p in qc.redis.xpending_range(items, "g", "-", "+", 100)]


def claim(qc, worker, n, queue="default"):
    qk, cfg = qc.keys.queue(queue), qc.queue_config(queue)
    _, *tokens = qc.scripts("cycle", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked, qk.wake, qk.config,
                                      qk.lastserved, qk.rate, qk.ratelog, qk.needs,
                                      qk.groups, qk.glimits, qk.gheld, qk.packed, qk.lane, qk.tomb], [worker, cfg.lease_ms, n, 0, 1])
    return tokens


def take(qc, rid, worker, n):
    """(entry, attempt) of the items a take hands out."""
    got = qc.scripts("take", qc.keys.request(rid).all(), [worker, 60_000, 3, 60_000, "", n])
    return [(got[i], int(got[i + 3])) for i in range(7, len(got), 4)]


def untake(qc, rid, worker, taken):
    rk = qc.keys.request(rid)
    return qc.scripts("untake", [rk.meta, rk.items, rk.leases], [worker, *(v for pair in taken for v in pair)])


# -- the untake script -------------------------------------------------------------

def test_untake_gives_items_back_as_if_they_had_not_been_taken(qc):
    sub = qc.submit("default", "echo", ["a", "b", "c"], dedup=False, concurrency=3)
    assert len(claim(qc, "w1", 3)) == 3
    taken = take(qc, sub.id, "w1", 2)
    assert [a for _, a in taken] == [1, 1] and qc.status(sub.id)["state"] == "running"
    assert untake(qc, sub.id, "w1", taken) == 2
    st = qc.status(sub.id)
    assert st["state"] == "queued" and st["started_at"] is None and deliveries(qc, sub.id) == [0, 0]
    again = take(qc, sub.id, "w2", 3)  # the same items first, then the next one; no attempt counted
    assert [e for e, _ in again[:2]] == [e for e, _ in taken] and [a for _, a in again] == [1, 1, 1]
    assert untake(qc, sub.id, "w1", again[:1]) == 0  # not its own any more: left alone
    assert qc.status(sub.id)["state"] == "running"


def test_untake_keeps_the_attempt_of_a_redelivery_and_the_state_of_a_started_request(qc):
    sub = qc.submit("default", "echo", ["a"], dedup=False)
    claim(qc, "w1", 1)
    ((entry, attempt),) = take(qc, sub.id, "w1", 1)
    rk = qc.keys.request(sub.id)
    qc.scripts("requeue", [rk.items, rk.leases], ["ids", entry])  # its lease ran out: due again
    ((_, second),) = take(qc, sub.id, "w2", 1)
    assert (attempt, second) == (1, 2)
    assert untake(qc, sub.id, "w2", [(entry, second)]) == 1
    assert qc.status(sub.id)["state"] == "running"  # it had started (attempt 1)
    assert take(qc, sub.id, "w3", 1) == [(entry, 2)]


def test_untake_of_a_one_item_request(qc):
    sub = qc.submit("default", "echo", ["a"], dedup=False)
    claim(qc, "w1", 1)
    taken = take(qc, sub.id, "w1", 1)
    assert untake(qc, sub.id, "w1", taken) == 1
    item = qc.lean_item(sub.id)
    assert item["d"] == "0" and "h" not in item and qc.redis.zcard(qc.keys.request(sub.id).leases) == 0
    assert qc.status(sub.id)["state"] == "queued" and take(qc, sub.id, "w2", 1) == [(taken[0][0], 1)]


# -- workers with different processors ---------------------------------------------

def test_a_worker_without_the_processor_leaves_the_items_to_one_that_has_it(qc):
    many = qc.submit("default", "shout", ["a", "b", "c"], dedup=False, priority=90)
    one = qc.submit("default", "shout", ["d"], dedup=False, priority=90)
    plain = qc.submit("default", "echo", ["e"], dedup=False, priority=10)
    lacking = run_burst(qc, BUILTIN)  # passes over the better ones, runs what it can, exits
    assert qc.status(plain.id)["state"] == "completed" and lacking.failed == 0
    for sub in (many, one):
        st = qc.status(sub.id)
        assert (st["state"], st["done"], st["failed"], st["dead"]) == ("queued", 0, 0, 0)
        assert set(deliveries(qc, sub.id)) == {0} and {r["status"] for r in qc.results(sub.id)} == {"pending"}
        since, processor = abilities.parse_mark(qc.redis.hget(qc.keys.queue("default").needs, sub.id))
        assert processor == "shout" and since <= time.time() * 1000
    having = run_burst(qc, WITH_SHOUT)
    for sub, out in ((many, ["A", "B", "C"]), (one, ["D"])):
        assert qc.status(sub.id)["state"] == "completed"
        records = list(qc.results(sub.id))
        assert [r["result"] for r in records] == out
        assert {r["attempts"] for r in records} == {1} and {r["worker"] for r in records} == {having.id}


def test_two_live_workers_with_different_processors_each_run_what_they_can(qc):
    left = {**BUILTIN, "left": BUILTIN["uppercase"]}
    right = {**BUILTIN, "right": BUILTIN["word_count"]}
    subs = {"left": [], "right": []}
    for n in range(8):
        for name in subs:
            subs[name].append(qc.submit("default", name, [f"item {n}"], dedup=False))
            subs[name].append(qc.submit("default", name, [f"a {n}", f"b {n} c"], dedup=False, concurrency=2))
    a, b = make_worker(qc, left, burst=True), make_worker(qc, right, burst=True)
    threads = [threading.Thread(target=w.work, daemon=True) for w in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    for name, worker in (("left", a), ("right", b)):
        for sub in subs[name]:
            assert qc.status(sub.id)["state"] == "completed", sub
            records = list(qc.results(sub.id))
            assert {r["worker"] for r in records} == {worker.id} and {r["attempts"] for r in records} == {1}
    assert a.failed == b.failed == 0


def test_a_handoff_that_reaches_a_worker_without_the_processor_goes_back_untouched(qc):
    qk = qc.keys.queue("default")
    qc.redis.hset(qk.can, "w-has", abilities.joined(["shout"]))
    qc.scripts("rest", [qk.idle, qk.wake], ["w-has", "in"])
    sub = qc.submit("default", "shout", ["x"], dedup=False)
    (value,) = [v for v in qc.redis.lrange(qk.wake, 0, -1) if v.startswith("[")]
    qc.redis.lrem(qk.wake, 1, value)  # popped by a worker it was not made for, that lacks shout
    lacking = make_worker(qc, BUILTIN)
    lacking.handoffs.popped("default", value)
    assert not lacking.claims.start_handed()
    lacking.claims.flush()
    assert qc.redis.hgetall(qk.held) == {} and qc.redis.zrange(qk.tokens, 0, -1) == [f"{sub.id}#1"]
    assert deliveries(qc, sub.id) == [0] and qc.status(sub.id)["state"] == "queued"
    assert abilities.parse_mark(qc.redis.hget(qk.needs, sub.id))[1] == "shout"
    having = run_burst(qc, WITH_SHOUT)
    assert [(r["result"], r["attempts"], r["worker"]) for r in qc.results(sub.id)] == [("X", 1, having.id)]


def test_with_no_live_worker_that_has_it_the_items_fail_after_the_wait_the_queue_allows(qc):
    qc.define_queue("rare", QueueConfig(unrunnable_seconds=1.5, max_attempts=2, backoff_seconds=0.05))
    sub = qc.submit("rare", "shout", ["x", "y"], dedup=False)
    began = time.time()
    with Running(make_worker(qc, BUILTIN, queues=["rare"])) as lacking:
        def waiting():
            return abilities.waiting(qc, "rare", lacking.registry.workers(), 1.5)

        entry = wait_for(lambda: [e for e in waiting() if e["orphaned_since"]], 10, message="an orphan")[0]
        assert entry["message"] == "no live worker has processor 'shout'" and entry["workers"] == []
        assert entry["request_ids"] == [sub.id] and entry["fails_at"] == entry["orphaned_since"] + 1.5
        assert qc.status(sub.id)["failed"] == 0
        wait_for(lambda: qc.status(sub.id)["state"] == "failed", 30, message="the items to fail")
    assert time.time() - began >= 1.5
    records = list(qc.results(sub.id))
    assert [r["status"] for r in records] == ["failed", "failed"] and {r["attempts"] for r in records} == {2}
    assert all("no live worker has processor 'shout'" in r["error"] for r in records)
    assert qc.status(sub.id)["dead"] == 2  # dead letters, to retry once a worker has it


def test_a_live_worker_that_has_the_processor_keeps_it_from_being_an_orphan(qc):
    # marked, a request has been taken once, so it holds a token or a reqs entry: never a lane
    # entry, which priority 50 would give it here (store/packed.py)
    sub = qc.submit("default", "shout", ["x"], priority=60, dedup=False)
    qk = qc.keys.queue("default")
    abilities_mark(qc, sub.id)
    lacks = {"id": "a", "live": True, "queues": "default", "can": abilities.joined(["echo"]), "lacks": ""}
    has = {"id": "b", "live": True, "queues": "default", "can": abilities.joined(["echo", "shout"])}
    assert set(abilities.review(qc, "default", [lacks])) == {"shout"}
    since = int(qc.redis.hget(qk.orphans, "shout"))
    assert abilities.review(qc, "default", [lacks]) == {"shout": since}  # the first time stays
    assert abilities.review(qc, "default", [lacks, has]) == {} and qc.redis.hlen(qk.orphans) == 0
    assert abilities.review(qc, "default", [lacks, {**has, "live": False}]) == {"shout": pytest.approx(since, abs=5000)}
    tasks = {"id": "c", "live": True, "queues": "default", "can": "", "families": abilities.joined(["task:"])}
    assert abilities.capable(tasks, "task:shop.tasks.send") and not abilities.capable(tasks, "shout")
    assert not abilities.capable({**tasks, "lacks": abilities.joined(["task:shop.tasks.send"])},
                                 "task:shop.tasks.send")
    qc.cancel(sub.id)
    assert abilities.review(qc, "default", [lacks]) == {}
    assert qc.redis.hlen(qk.needs) == 0 and qc.redis.hlen(qk.orphans) == 0  # forgotten with the request


def abilities_mark(qc, rid, processor="shout"):
    pipe = qc.redis.pipeline(transaction=False)
    abilities.mark(pipe, qc.keys.queue("default"), rid, processor)
    pipe.execute()


def test_a_worker_that_lacks_the_processor_of_what_waits_does_not_wake_for_it(qc):
    """While a worker that has the processor runs a request's items, each
    token it gives back wakes an idle worker: not, for long, one that lacks
    the processor (it mutes the queue after a claim that only passed over)."""
    naps = {**BUILTIN, "nap": BUILTIN["sleep"]}
    sub = qc.submit("default", "nap", [0.05] * 40, dedup=False, concurrency=10)
    lacking, cycles = make_worker(qc, BUILTIN), []
    cycle = lacking.claims.cycle
    lacking.claims.cycle = lambda *args, **kwargs: cycles.append(1) or cycle(*args, **kwargs)  # counted, unchanged
    with Running(lacking):
        wait_for(lambda: qc.redis.hlen(qc.keys.queue("default").needs) == 1, 10, message="the mark")
        before, began = len(cycles), time.monotonic()
        having = run_burst(qc, naps)  # 2 threads: 40 tokens given back while 8 wait, about 1 s
        took = time.monotonic() - began
    assert qc.status(sub.id)["state"] == "completed" and {r["worker"] for r in qc.results(sub.id)} == {having.id}
    # a claim per MUTE (4/s) or tick, not one per token given back (about 40/s unmuted)
    assert len(cycles) - before < 6 * took + 4, (len(cycles) - before, took)


def test_a_worker_says_what_it_can_run(qc):
    w = make_worker(qc, WITH_SHOUT)
    assert not w.abilities.can_run("nope") and w.abilities.can_run("shout")
    fields = w.abilities.registry_fields()
    assert "\nshout\n" in fields["can"] and fields["lacks"] == "\nnope\n" and fields["families"] == ""
    w.routing.publish_can()  # and that it reads packed one-item requests (store/packed.py)
    assert qc.redis.hget(qc.keys.queue("default").can, w.id) == fields["can"] + "\n".join(packed.WORKER_MARKS) + "\n"
    assert json.loads(json.dumps(fields)) == fields
