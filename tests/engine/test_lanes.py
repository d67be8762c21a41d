"""Lanes (docs/keys.md, lua/_common.lua lane_entry): a one-item request at
LANE_P with no de-dup key waits as an entry "seq|id" of its queue's lane
instead of a token. Claims take the lane and the tokens in the one order
tokens alone would give; cancel, a priority change, aging, the counts and
readers, the handoff, workers of the release before and SIGKILL hold as for
tokens. Runs on a single server and on a cluster."""
import itertools
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.store import packed
from tests.engine.runtime.test_handoff import handoffs, rest
from tests.engine.test_oneitem import claim, started_order
from tests.engine_helpers import burst, dispatch_is_empty, kill_at_random, wait_for

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)

pytestmark = pytest.mark.timeout(120)

MARKS = "\n".join(packed.WORKER_MARKS)


def test_a_one_item_request_at_the_lane_priority_waits_in_the_lane_not_as_a_token(qc):
    qk, r = qc.keys.queue("default"), qc.redis
    subs = [qc.submit("default", "echo", [i], dedup=False) for i in range(5)]
    assert r.zcard(qk.tokens) == 0 and r.llen(qk.lane) == 5 and r.hgetall(qk.packed) == {"50": "5"}
    higher = qc.submit("default", "echo", ["p"], priority=51, dedup=False)  # another priority: a token
    keyed = qc.submit("default", "echo", ["k"], dedup_key="k")  # a de-dup key: a token, which de-dup finds
    assert r.zcard(qk.tokens) == 2 and r.llen(qk.lane) == 5 and r.hgetall(qk.packed) == {"50": "6", "51": "1"}
    assert qc.submit("default", "echo", ["again"], dedup_key="k").id == keyed.id
    order = [higher.id, *(s.id for s in subs), keyed.id]
    assert packed.unindexed(r, qc.keys, "default") == order
    assert packed.unindexed(r, qc.keys, "default", limit=3) == order[:3]
    stats = qc.queue_stats("default")
    assert (stats["depth"], stats["depth_by_priority"], stats["tokens_waiting"]) == (7, {51: 1, 50: 6}, 7)
    assert set(qc.live_requests("default")) == set(order)
    assert packed.oldest_waiting(r, qc.keys, "default", [50]) == int(qc.reads.meta(subs[0].id)["created_at"])
    assert claim(qc, "default", "w1", 10) == [f"{rid}#1" for rid in order]
    assert not r.exists(qk.lane) and not r.exists(qk.packed)


def test_the_lane_and_the_tokens_of_its_band_are_claimed_in_submission_order(qc):
    """A many-item request's token and a keyed request's token at the lane's
    priority fall between lane entries: claims one at a time and in a batch
    both give the order of submission, after a better band's tokens."""
    r = qc.redis
    a = qc.submit("default", "echo", ["a"], dedup=False)
    many = qc.submit("default", "echo", ["m1", "m2"], concurrency=1, dedup=False)
    b = qc.submit("default", "echo", ["b"], dedup=False)
    c = qc.submit("default", "echo", ["c"], dedup_key="c")
    d = qc.submit("default", "echo", ["d"], dedup=False)
    best = qc.submit("default", "echo", ["best"], priority=70, dedup=False)
    want = [best.id, a.id, many.id, b.id, c.id, d.id]
    assert claim(qc, "default", "w1", 2) == [f"{rid}#1" for rid in want[:2]]
    assert claim(qc, "default", "w1", 1) == [f"{many.id}#1"]
    assert claim(qc, "default", "w1", 5) == [f"{rid}#1" for rid in want[3:]]
    assert r.llen(qc.keys.queue("default").lane) == 0


def test_a_cancel_drops_the_lanes_head_at_once_and_tombstones_one_behind_it(qc):
    qk, r = qc.keys.queue("default"), qc.redis
    subs = [qc.submit("default", "echo", [i], dedup=False) for i in range(4)]
    qc.cancel(subs[0].id)  # the head: popped, no tombstone
    assert r.llen(qk.lane) == 3 and not r.exists(qk.tomb) and r.hgetall(qk.packed) == {"50": "3"}
    qc.cancel(subs[2].id)  # behind the head: its entry stays, with a tombstone
    assert r.llen(qk.lane) == 3 and r.smembers(qk.tomb) == {subs[2].id} and r.hgetall(qk.packed) == {"50": "2"}
    assert packed.unindexed(r, qc.keys, "default") == [subs[1].id, subs[3].id]
    assert qc.queue_stats("default")["tokens_waiting"] == 2
    with pytest.raises(QueueError, match="already finished"):
        qc.cancel(subs[2].id)
    assert r.hgetall(qk.packed) == {"50": "2"}  # a second cancel counts nothing out
    burst(qc)  # its claims pass the tombstone by; the empty lane takes the SET with it
    assert [qc.status(s.id)["state"] for s in subs] == ["cancelled", "completed", "cancelled", "completed"]
    assert started_order(qc, [subs[1], subs[3]]) == [subs[1].id, subs[3].id]
    assert dispatch_is_empty(qc)


def test_a_priority_change_takes_a_lane_request_out_to_a_token_of_its_new_band(qc):
    qk, r = qc.keys.queue("default"), qc.redis
    subs = [qc.submit("default", "echo", [i], dedup=False) for i in range(3)]
    qc.set_priority(subs[1].id, 50)  # the same: it stays where it is
    assert r.llen(qk.lane) == 3 and r.zcard(qk.tokens) == 0
    qc.set_priority(subs[1].id, 80)
    qc.set_priority(subs[2].id, 20)
    assert r.zcard(qk.tokens) == 2 and r.smembers(qk.tomb) == {subs[1].id, subs[2].id}
    assert r.hgetall(qk.packed) == {"80": "1", "50": "1", "20": "1"}
    assert qc.live_requests("default")[subs[1].id]["priority"] == 80
    qc.set_priority(subs[1].id, 50)  # now a token: moved as one, to the tail of the lane's band
    assert r.hgetall(qk.packed) == {"50": "2", "20": "1"}
    assert claim(qc, "default", "w1", 5) == [f"{subs[i].id}#1" for i in (0, 1, 2)]
    assert not r.exists(qk.tomb) and not r.exists(qk.lane) and not r.exists(qk.packed)


def test_aging_takes_the_lanes_head_up_to_a_token(qc):
    qk, r = qc.keys.queue("default"), qc.redis
    old, young = (qc.submit("default", "echo", [x], dedup=False) for x in ("old", "young"))
    qc.store.queue.tick("default", 100, 50)  # its clock starts
    time.sleep(0.22)
    qc.store.queue.tick("default", 100, 50)  # 4 intervals waited: 4 levels up, out of the lane
    assert r.hgetall(qk.packed) == {"54": "1", "50": "1"}
    assert r.lrange(qk.lane, 0, -1) == [r.lindex(qk.lane, 0)] and r.zrange(qk.tokens, 0, -1) == [f"{old.id}#1"]
    better = qc.submit("default", "echo", ["b"], priority=52, dedup=False)
    assert claim(qc, "default", "w1", 3) == [f"{old.id}#1", f"{better.id}#1", f"{young.id}#1"]


def test_a_lane_entry_passed_over_becomes_its_token_in_its_place(qc):
    """A worker that lacks a processor passes over what is marked with it
    (routing.py): a lane entry so marked goes into the tokens at its own
    score, and the next claim of a worker that has it keeps the order."""
    qk, r = qc.keys.queue("default"), qc.redis
    a, b, c = (qc.submit("default", "echo", [x], dedup=False) for x in "abc")
    r.hset(qk.needs, a.id, "1|echo")  # as if a worker had found it could not run a
    cfg = qc.queue_config("default")
    keys = [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked, qk.wake, qk.config, qk.lastserved, qk.rate,
            qk.ratelog, qk.needs, qk.groups, qk.glimits, qk.gheld, qk.packed, qk.lane, qk.tomb]
    got = qc.scripts("cycle", keys, ["w-lacks", cfg.lease_ms, 1, 0, 1, "\necho\n"])
    assert got == [0, f"{b.id}#1"]  # a passed over, b claimed
    assert r.zrange(qk.tokens, 0, -1) == [f"{a.id}#1"] and r.lrange(qk.lane, 0, -1) == [r.lindex(qk.lane, 0)]
    assert r.hgetall(qk.packed) == {"50": "2"}
    r.hdel(qk.needs, a.id)
    assert claim(qc, "default", "w1", 3) == [f"{a.id}#1", f"{c.id}#1"]


def test_a_queue_served_by_a_worker_of_the_release_before_gets_tokens(qc):
    """A worker from before lanes (its `can` entry lacks LANE_MARK) would never
    claim a lane entry: producers make tokens until it has gone."""
    qk, r = qc.keys.queue("default"), qc.redis
    r.hset(qk.can, "old:1:aa", "\necho\n" + packed.PACKED_MARK + "\n" + packed.COUNTED_MARK + "\n")
    qc.submission.gate.forget()
    before = qc.submit("default", "echo", ["before"], dedup=False)
    assert r.zscore(qk.tokens, f"{before.id}#1") is not None and r.llen(qk.lane) == 0
    r.hset(qk.can, "old:1:aa", "\necho\n" + MARKS + "\n")
    qc.submission.gate.forget()
    after = qc.submit("default", "echo", ["after"], dedup=False)
    assert r.llen(qk.lane) == 1 and r.hgetall(qk.packed) == {"50": "2"}
    r.hdel(qk.can, "old:1:aa")
    burst(qc)
    assert [[x["result"] for x in qc.results(s.id)] for s in (before, after)] == [["before"], ["after"]]
    assert dispatch_is_empty(qc)


def test_no_handoff_passes_the_lane(qc):
    """A resting worker gets a new request at once only when nothing waits
    before it: not at the lane's priority or below while the lane holds one."""
    qk = qc.keys.queue("default")
    waiting = qc.submit("default", "echo", ["first"], dedup=False)
    rest(qc, "default", "w1", can=("echo", *packed.WORKER_MARKS))
    qc.submission.gate.forget()
    same = qc.submit("default", "echo", ["same"], dedup=False)
    lower = qc.submit("default", "echo", ["lower"], priority=40, dedup=False)
    assert handoffs(qc, "default") == [] and qc.redis.llen(qk.lane) == 2
    higher = qc.submit("default", "echo", ["higher"], priority=60, dedup=False)
    assert [h[1] for h in handoffs(qc, "default")] == [higher.id]
    assert claim(qc, "default", "w2", 5) == [f"{rid}#1" for rid in (waiting.id, same.id, lower.id)]


# -- the order, against a model ---------------------------------------------------

SUBMIT = st.tuples(st.just("submit"), st.sampled_from([40, 50, 50, 50, 60]), st.booleans())
CANCEL = st.tuples(st.just("cancel"), st.integers(0, 40))
CHANGE = st.tuples(st.just("priority"), st.integers(0, 40), st.sampled_from([40, 50, 60]))
CLAIM = st.tuples(st.just("claim"), st.integers(1, 4))
QUEUES = itertools.count()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(SUBMIT, SUBMIT, CANCEL, CHANGE, CLAIM), min_size=1, max_size=30))
def test_any_mix_of_submits_cancels_changes_and_claims_claims_in_the_order_of_priority_then_time(qc, ops):
    """A model of the order: best priority first, then the order of
    submission or of the last priority change. The claims, the counts by
    band and the readers agree with it after every step."""
    queue = f"model{next(QUEUES)}"
    qc.define_queue(queue, QueueConfig())
    r, qk = qc.redis, qc.keys.queue(queue)
    waiting: dict[str, tuple[int, int]] = {}  # rid -> (priority, order)
    made, clock = [], itertools.count()
    for op in ops:
        if op[0] == "submit":
            keyed = {"dedup_key": f"k{len(made)}"} if op[2] else {"dedup": False}
            sub = qc.submit(queue, "echo", [len(made)], priority=op[1], **keyed)
            made.append(sub.id)
            waiting[sub.id] = (op[1], next(clock))
        elif op[0] in ("cancel", "priority") and made:
            rid = made[op[1] % len(made)]
            if rid not in waiting:
                continue
            if op[0] == "cancel":
                qc.cancel(rid)
                del waiting[rid]
            elif op[2] != waiting[rid][0]:
                qc.set_priority(rid, op[2])
                waiting[rid] = (op[2], next(clock))
        elif op[0] == "claim":
            line = sorted(waiting, key=lambda rid: (-waiting[rid][0], waiting[rid][1]))
            assert claim(qc, queue, "w1", op[1]) == [f"{rid}#1" for rid in line[:op[1]]]
            for rid in line[:op[1]]:
                del waiting[rid]
        bands: dict[int, int] = {}
        for p, _ in waiting.values():
            bands[p] = bands.get(p, 0) + 1
        assert packed.waiting_counts(r, qc.keys, queue) == bands
    line = sorted(waiting, key=lambda rid: (-waiting[rid][0], waiting[rid][1]))
    assert [rid for rid in packed.unindexed(r, qc.keys, queue) if rid in waiting] == line
    assert claim(qc, queue, "w1", len(line) + 1) == [f"{rid}#1" for rid in line]
    assert not r.exists(qk.lane) and not r.exists(qk.tomb) and not r.exists(qk.packed)


# -- crashes ---------------------------------------------------------------------

def test_sigkill_at_random_instants_loses_no_request_waiting_in_the_lane(qc, workers):
    qc.define_queue("crash", QueueConfig(lease_seconds=2))
    subs = [qc.submit("crash", "sleep", [0.01], dedup=False) for _ in range(500)]
    assert qc.redis.llen(qc.keys.queue("crash").lane) == 500
    cancelled = {s.id for s in subs[100:500:50]}  # tombstones on the way
    for rid in cancelled:
        qc.cancel(rid)
    held = qc.keys.queue("crash").held
    kill_at_random(workers, "crash", seed=7, kills=5, low=0.1, high=0.4, busy=lambda: qc.redis.hlen(held) > 0)
    rids = [s.id for s in subs]

    def all_over():
        return all(s and s["state"] in ("completed", "cancelled") for s in qc.statuses(rids))

    wait_for(all_over, 90, interval=0.3, message=workers.logs())
    attempts = []
    for rid, st_ in zip(rids, qc.statuses(rids)):
        assert st_["state"] == ("cancelled" if rid in cancelled else "completed")
        (rec,) = list(qc.results(rid))
        assert rec["status"] == ("cancelled" if rid in cancelled else "done")
        attempts.append(rec.get("attempts", 1))
    assert max(attempts) >= 2, "no kill landed on an item in flight: the test proved nothing"
    wait_for(lambda: dispatch_is_empty(qc, "crash"), 10)


LANE_STATE = """return {redis.call('LRANGE', KEYS[1], 0, -1), redis.call('SMEMBERS', KEYS[2]),
                        redis.call('HGET', KEYS[3], '50')}"""  # read at one instant: the three share a slot


def test_cancels_racing_the_workers_at_the_lanes_head_keep_its_count_exact(qc, workers):
    """A cancel of a lane request is one script with its retire (cancel_one-18):
    cancels of the request a worker is about to claim leave no tombstone of
    an id the lane does not hold, and the band's count always equals the
    lane's live entries."""
    qc.define_queue("race", QueueConfig(lease_seconds=5))
    qk = qc.keys.queue("race")
    subs = [qc.submit("race", "sleep", [0.003], dedup=False) for _ in range(400)]
    workers.start("race")
    wait_for(lambda: qc.redis.hlen(qk.held) > 0, 30, interval=0.005, message=workers.logs())
    cancelled, checks = set(), 0
    while True:
        lane, tomb, count = qc.redis.eval(LANE_STATE, 3, qk.lane, qk.tomb, qk.packed)
        ids = [entry.partition("|")[2] for entry in lane]
        assert set(tomb) <= set(ids), "a tombstone of an id the lane does not hold"
        assert int(count or 0) == len([rid for rid in ids if rid not in tomb])
        checks += 1
        live = [rid for rid in ids if rid not in tomb]
        if not live:
            break
        try:
            qc.cancel(live[0])  # the head: the one a worker claims next
            cancelled.add(live[0])
        except QueueError:  # claimed and finished meanwhile
            pass
    rids = [s.id for s in subs]
    wait_for(lambda: all(s["state"] in ("completed", "cancelled") for s in qc.statuses(rids)), 60,
             message=workers.logs())
    assert len(cancelled) > 20 and checks > 20
    for rid, status in zip(rids, qc.statuses(rids)):  # one outcome each; one running when cancelled finishes
        (rec,) = list(qc.results(rid))
        assert rec["status"] in (("cancelled", "done") if status["state"] == "cancelled" else ("done",))
    wait_for(lambda: dispatch_is_empty(qc, "race"), 10)
