"""Handoffs (core/engine/handoff.py): a one-item request submitted while a
worker rests on its queue goes to that worker with its item, claimed and
leased as by a claim, unless something may go first; a worker that pops a
handoff made for another takes it over first; a handoff made for a worker
that dies is not lost. Runs on a single server and on a cluster."""
import json
import random
import threading
import time

import pytest

from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.worker import Worker
from tests.engine_helpers import ALL_PROCESSORS, dispatch_is_empty, wait_for

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)

pytestmark = pytest.mark.timeout(120)


def rest(qc, queue, worker, began_ms=None, can=("echo",)):
    """`worker` at rest on `queue` (as a worker does before it blocks), saying it
    can run the processors `can` (routing.py); began_ms backdates it."""
    qk = qc.keys.queue(queue)
    qc.redis.hset(qk.can, worker, "\n" + "\n".join(can) + "\n")
    qc.scripts("rest", [qk.idle, qk.wake], [worker, "in"])
    if began_ms is not None:
        qc.redis.zadd(qk.idle, {worker: began_ms})


def handoffs(qc, queue):
    return [json.loads(v) for v in qc.redis.lrange(qc.keys.queue(queue).wake, 0, -1) if v.startswith("[")]


def each_done_once(qc, queue, subs, workers, timeout):
    """Every request completes with one result; then nothing is left in
    dispatch and no handoff on the wake list."""
    rids = [s.id for s in subs]
    wait_for(lambda: all(s and s["state"] == "completed" for s in qc.statuses(rids)), timeout, interval=0.2,
             message=workers.logs())
    for rid in rids:
        (rec,) = list(qc.results(rid))
        assert rec["status"] == "done" and [f for f in qc.redis.hkeys(qc.keys.request(rid).results) if f.isdigit()] == ["0"]
    wait_for(lambda: dispatch_is_empty(qc, queue) and handoffs(qc, queue) == [], 10)


def now_ms(qc):
    sec, usec = qc.redis.time()
    return sec * 1000 + usec // 1000


# -- the submit script -------------------------------------------------------------

def test_a_submission_to_a_resting_worker_is_claimed_and_taken_for_it(qc):
    qk = qc.keys.queue("default")
    rest(qc, "default", "w1")
    sub = qc.submit("default", "echo", ["hello"], dedup=False)
    token = f"{sub.id}#1"
    item = qc.redis.hgetall(qc.keys.request(sub.id).items)
    assert qc.redis.hget(qk.held, token) == "w1" and item["h"] == "w1" and item["d"] == "1"
    assert qc.redis.zscore(qk.leases, token) > now_ms(qc)  # leased as by a claim
    assert qc.redis.zcard(qk.tokens) == 0 and qc.status(sub.id)["state"] == "running"
    ((wid, rid, took, began),) = handoffs(qc, "default")
    assert (wid, rid) == ("w1", sub.id) and took[0] == 0 and took[9] == '"hello"'
    assert began <= now_ms(qc)  # when its rest began: for a takeover (adopt-5)
    assert sub.id not in qc.redis.lrange(qk.wake, 0, -1)  # no wake marker besides the handoff
    assert qc.redis.zscore(qk.idle, "w1") is None  # busy from now on: the next submission is not its
    other = qc.submit("default", "echo", ["next"], dedup=False)
    assert qc.redis.hget(qk.held, f"{other.id}#1") is None and other.id in qc.redis.lrange(qk.wake, 0, -1)


def test_a_worker_that_woke_for_other_work_gets_back_the_handoffs_no_one_popped(qc):
    qk = qc.keys.queue("default")
    qc.redis.delete(qk.wake)  # the marker of the queue's definition
    rest(qc, "default", "w1")
    sub = qc.submit("default", "echo", ["x"], dedup=False)
    qc.redis.rpush(qk.wake, 1)
    (back,) = qc.scripts("rest", [qk.idle, qk.wake], ["w1", "out"])
    assert json.loads(back)[:2] == ["w1", sub.id]
    assert qc.redis.lrange(qk.wake, 0, -1) == ["1"]  # the handoff left the list; markers stay
    rest(qc, "default", "w2")
    assert qc.scripts("rest", [qk.idle, qk.wake], ["w2", "out"]) == []  # still at rest: nothing was made for it


@pytest.mark.parametrize("case", ["paused", "queue rate limit", "own rate limit", "delay", "same priority waits",
                                  "higher priority waits", "rest of a dead worker"])
def test_no_handoff_when_something_may_go_first(qc, case):
    qk = qc.keys.queue("default")
    kwargs = {}
    if case == "paused":
        qc.set_paused("default", True)
    elif case == "queue rate limit":
        qc.define_queue("default", QueueConfig(rate_limit="100/s"))
    elif case == "own rate limit":
        kwargs["rate_limit"] = "100/s"
    elif case == "delay":
        kwargs["delay"] = 5
    elif case == "same priority waits":
        qc.submit("default", "echo", ["first"], dedup=False, priority=50)
    elif case == "higher priority waits":
        qc.submit("default", "echo", ["first"], dedup=False, priority=70)
    rest(qc, "default", "w1", began_ms=now_ms(qc) - 5000 if case == "rest of a dead worker" else None)
    sub = qc.submit("default", "echo", ["x"], dedup=False, priority=50, **kwargs)
    assert qc.redis.hget(qk.held, f"{sub.id}#1") is None and handoffs(qc, "default") == []
    assert qc.lean_item(sub.id)["d"] == "0"  # never delivered (still packed: engine/store/packed.py)
    if case == "rest of a dead worker":
        assert qc.redis.zscore(qk.idle, "w1") is None  # swept
    elif case not in ("delay",):
        assert qc.redis.zscore(qk.idle, "w1") is not None  # still at rest for what may come


def test_a_handoff_is_made_only_for_a_worker_that_says_it_can_run_the_processor(qc):
    qk = qc.keys.queue("default")
    rest(qc, "default", "lacks", began_ms=now_ms(qc) - 100, can=("uppercase",))
    rest(qc, "default", "has", can=("uppercase", "echo"))
    sub = qc.submit("default", "echo", ["x"], dedup=False)
    assert qc.redis.hget(qk.held, f"{sub.id}#1") == "has"  # not the longest at rest, which lacks echo
    assert qc.redis.zscore(qk.idle, "lacks") is not None
    qc.redis.hdel(qk.can, "lacks")  # says nothing (an older version): no handoff for it either
    other = qc.submit("default", "echo", ["y"], dedup=False)
    assert qc.redis.hget(qk.held, f"{other.id}#1") is None and other.id in qc.redis.lrange(qk.wake, 0, -1)


def test_a_lower_priority_token_waiting_does_not_stop_a_handoff(qc):
    low = qc.submit("default", "echo", ["low"], dedup=False, priority=10)
    rest(qc, "default", "w1")
    sub = qc.submit("default", "echo", ["x"], dedup=False, priority=50)
    assert qc.redis.hget(qc.keys.queue("default").held, f"{sub.id}#1") == "w1"
    assert qc.redis.zrange(qc.keys.queue("default").tokens, 0, -1) == [f"{low.id}#1"]


def test_clearing_wake_markers_keeps_the_handoffs(qc):
    qk = qc.keys.queue("default")
    rest(qc, "default", "w1")
    qc.submit("default", "echo", ["x"], dedup=False)
    qc.redis.rpush(qk.wake, 1, 1)
    cfg = qc.queue_config("default")
    qc.scripts("cycle", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked, qk.wake, qk.config,
                         qk.lastserved, qk.rate, qk.ratelog, qk.needs,
                                      qk.groups, qk.glimits, qk.gheld, qk.packed, qk.lane, qk.tomb], ["w2", cfg.lease_ms, 5, 0, 1])  # nothing waits
    assert len(handoffs(qc, "default")) == 1 and len(qc.redis.lrange(qk.wake, 0, -1)) == 1


def test_recovering_a_dead_worker_removes_its_handoffs_and_gives_back_the_token(qc):
    qk = qc.keys.queue("default")
    rest(qc, "default", "dead")
    sub = qc.submit("default", "echo", ["x"], dedup=False)
    rids = qc.scripts("release_worker", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked, qk.wake],
                      ["dead"])
    assert rids == [sub.id] and handoffs(qc, "default") == []
    assert qc.redis.zrange(qk.tokens, 0, -1) == [f"{sub.id}#1"]


# -- real workers --------------------------------------------------------------------

class Running:
    """An in-process worker on a thread (not burst): it rests when idle."""

    def __init__(self, qc, queues=("default",)):
        self.worker = Worker(qc, list(queues), Processors(ALL_PROCESSORS), install_signals=False, threads=1)
        self.thread = threading.Thread(target=self.worker.work, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self.worker

    def __exit__(self, *exc):
        self.worker.stop()
        self.thread.join(15)
        assert not self.thread.is_alive()


def test_a_resting_worker_runs_a_handoff(qc):
    qk = qc.keys.queue("default")
    with Running(qc) as w:
        wait_for(lambda: qc.redis.zscore(qk.idle, w.id) is not None, 10)
        sub = qc.submit("default", "uppercase", ["abc"], dedup=False)
        wait_for(lambda: qc.status(sub.id)["state"] == "completed", 10)
    (rec,) = list(qc.results(sub.id))
    assert (rec["result"], rec["attempts"], rec["worker"]) == ("ABC", 1, w.id)
    wait_for(lambda: dispatch_is_empty(qc), 10)


def test_a_worker_takes_over_a_handoff_made_for_another_and_its_retries_count(qc):
    """The handoff is made for a 'ghost' at rest longer than the real worker,
    which pops it: it takes the item over (adopt-5), so its failures are
    recorded as retries and then a dead letter, not left to a lease of 60 s."""
    qk = qc.keys.queue("default")
    qc.define_queue("default", QueueConfig(max_attempts=2, backoff_seconds=0.0, lease_seconds=60))
    with Running(qc) as w:
        wait_for(lambda: qc.redis.zscore(qk.idle, w.id) is not None, 10)
        began = now_ms(qc) - 500
        qc.redis.zadd(qk.idle, {"ghost": began})
        sub = qc.submit("default", "fail", ["x"], dedup=False)
        assert qc.redis.hget(qc.keys.request(sub.id).items, "d") == "1"  # handed to the ghost
        # taken over, and the ghost's rest is back as it began (it would still be blocked, were it alive)
        wait_for(lambda: qc.redis.zscore(qk.idle, "ghost") == began, 10)
        wait_for(lambda: qc.status(sub.id)["state"] == "failed", 15)
    st = qc.status(sub.id)
    (rec,) = list(qc.results(sub.id))
    assert st["dead"] == 1 and rec["attempts"] == 2 and rec["worker"] == w.id
    wait_for(lambda: dispatch_is_empty(qc), 10)


@pytest.mark.slow
@pytest.mark.parametrize("restart_after", [0.0, 2.5])
def test_a_handoff_made_for_a_sigkilled_worker_is_not_lost(qc, workers, restart_after):
    """A worker is SIGKILLed at rest: the next submission is handed to it (its
    rest looks alive), and no one is blocked to pop it. A new worker started at
    once pops it and takes it over; one started after the dead one's heartbeat
    ran out recovers it (release_worker removes the handoff, the item is due)."""
    qc.define_queue("crash", QueueConfig(lease_seconds=30))
    qk = qc.keys.queue("crash")
    first = workers.start("crash")
    wait_for(lambda: qc.redis.zcard(qk.idle) == 1, 30, message=workers.logs())
    (dead,) = qc.redis.zrange(qk.idle, 0, -1)
    workers.kill(first)
    first.wait(10)
    subs = [qc.submit("crash", "echo", [k], dedup=False) for k in range(20)]
    assert [h[0] for h in handoffs(qc, "crash")] == [dead]
    time.sleep(restart_after)
    workers.start("crash")
    each_done_once(qc, "crash", subs, workers, timeout=20)


@pytest.mark.slow
def test_sigkills_while_one_item_requests_trickle_in_to_resting_workers_lose_nothing(qc, workers):
    """Submissions arrive one by one while workers are mostly at rest (so most
    go as handoffs), and workers are SIGKILLed at random instants, some while
    a handoff made for them waits on the wake list: every request ends
    completed with one result, and nothing is left in dispatch."""
    qc.define_queue("trickle", QueueConfig(lease_seconds=2))
    qk = qc.keys.queue("trickle")
    procs = [workers.start("trickle"), workers.start("trickle")]
    wait_for(lambda: qc.redis.zcard(qk.idle) == 2, 30, message=workers.logs())
    rng = random.Random(7)
    subs, handed, kills = [], 0, 0
    next_kill = time.monotonic() + rng.uniform(0.3, 0.6)
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:
        sub = qc.submit("trickle", "echo", [len(subs)], dedup=False)
        subs.append(sub)
        handed += qc.redis.hget(qc.keys.request(sub.id).items, "d") != "0"
        if time.monotonic() >= next_kill:
            victim = procs.pop(rng.randrange(len(procs)))
            workers.kill(victim)
            procs.append(workers.start("trickle"))
            kills += 1
            next_kill = time.monotonic() + rng.uniform(0.3, 0.6)
        time.sleep(rng.uniform(0.001, 0.004))
    # enough handoffs that kills landed among them (a loaded machine rests its workers less:
    # 22-24% of submissions were handoffs with two suites running at once, over a third alone)
    assert kills >= 5 and handed >= len(subs) // 6, (kills, handed, len(subs))
    each_done_once(qc, "trickle", subs, workers, timeout=60)
