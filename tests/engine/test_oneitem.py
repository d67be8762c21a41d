"""One-item requests (every Django task's `.enqueue()`): the semantics of
DESIGN.md hold for them as for any request (priority over many levels,
de-dup, delay, expiry, dead letters and retry, cancel, results, SIGKILL), and
a claim stays large when many priority levels are in use (issue 13).
Runs on a single server and on a cluster."""
import json
import random
import time

import pytest
from redis.crc import key_slot

from queueadmin.core.engine import attempts
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.store import packed
from queueadmin.core.engine.store.keys import slot_tag
from queueadmin.core.engine.runtime.registry import Registry
from queueadmin.core.engine.runtime.upkeep import Upkeep
from tests.engine.client.test_reads import register_dead
from tests.engine_helpers import burst, dispatch_is_empty, kill_at_random, wait_for

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)

pytestmark = pytest.mark.timeout(120)


def started_order(qc, subs):
    rows = []
    for sub in subs:
        (rec,) = list(qc.results(sub.id))
        rows.append((rec["started_at"], sub.id))
    return [rid for _, rid in sorted(rows)]


def claim(qc, queue, worker, want, workers=1):
    """One dispatch round trip of a worker that gives nothing back."""
    qk = qc.keys.queue(queue)
    cfg = qc.queue_config(queue)
    return qc.scripts("cycle", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked, qk.wake, qk.config,
                                qk.lastserved, qk.rate, qk.ratelog, qk.needs,
                                      qk.groups, qk.glimits, qk.gheld, qk.packed, qk.lane, qk.tomb], [worker, cfg.lease_ms, want, 0, workers])[1:]


# -- where a one-item request lives ----------------------------------------------

def test_a_one_item_request_lives_in_its_queue_slot_and_others_in_their_own(qc):
    slot = {key_slot(k.encode()) for k in qc.keys.queue("default").all_dispatch()}
    one = qc.submit("default", "echo", ["x"])
    assert qc.keys.in_queue_slot(one.id) and one.id.endswith("-" + slot_tag("default"))
    assert {key_slot(k.encode()) for k in qc.keys.request(one.id).all()} == slot
    two = qc.submit("default", "echo", ["x", "y"])
    far = qc.submit("default", "echo", ["z"], delay=3600)  # waits in a schedule shard: its own slot
    for sub in (two, far):
        assert not qc.keys.in_queue_slot(sub.id)
        assert len({key_slot(k.encode()) for k in qc.keys.request(sub.id).all()}) == 1
    assert qc.status(one.id)["total"] == 1 and qc.status(far.id)["state"] == "scheduled"


def test_a_waiting_one_item_request_is_live_to_every_step_without_a_reqs_entry(qc):
    """Waiting packed, a one-item request has no entry in its queue's reqs
    (lua/_common.lua waiting_packed), yet de-dup, a priority change and the
    queue's figures see it, and it runs in its new place."""
    qk = qc.keys.queue("default")
    low = qc.submit("default", "echo", ["low"], priority=10, dedup_key="k-low")
    other = qc.submit("default", "echo", ["other"], priority=50, dedup=False)
    assert qc.redis.hlen(qk.reqs) == 0
    assert qc.submit("default", "echo", ["again"], dedup_key="k-low").id == low.id  # a duplicate while it waits
    assert {rid: v["priority"] for rid, v in qc.live_requests("default").items()} == {low.id: 10, other.id: 50}
    stats = qc.queue_stats("default")
    assert (stats["requests"], stats["depth"], stats["depth_by_priority"]) == (2, 2, {50: 1, 10: 1})
    qc.set_priority(low.id, 90)
    assert qc.live_requests("default")[low.id]["priority"] == 90
    burst(qc)
    assert started_order(qc, [low, other]) == [low.id, other.id]
    assert dispatch_is_empty(qc)


def test_while_a_worker_of_an_older_release_serves_the_queue_requests_wait_in_the_full_layout(qc):
    """A worker that cannot read packed requests (its `can` entry lacks the
    mark, store/packed.py) would find neither item nor reqs entry and drop
    them: producers make the full lean layout until it has gone."""
    qk = qc.keys.queue("default")
    subs = []
    # as a worker from before the packed layout says what it can run, then one from before the counts
    # (it would not count its claims of requests waiting unindexed), then one of this release
    for can in ("\necho\n", "\necho\n" + packed.PACKED_MARK + "\n", "\necho\n" + "\n".join(packed.WORKER_MARKS) + "\n"):
        qc.redis.hset(qk.can, "old:1:aa", can)
        qc.submission.gate.forget()
        subs.append(qc.submit("default", "echo", [len(subs)], dedup=False))
    for sub in subs[:2]:
        rk = qc.keys.request(sub.id)
        assert qc.redis.type(rk.items) == "hash" and qc.redis.hget(qk.reqs, sub.id) == "50|10|1|q"
        assert qc.redis.zscore(qk.index, sub.id) is not None
        assert {k: v for k, v in qc.redis.hgetall(rk.meta).items() if k in ("id", "total", "dedup_key")} == {
            "id": sub.id, "total": "1", "dedup_key": ""}
    new = subs[2]
    assert not qc.redis.exists(qc.keys.request(new.id).items) and qc.redis.hget(qk.reqs, new.id) is None
    assert qc.redis.zscore(qk.index, new.id) is None and qc.redis.hgetall(qk.packed) == {"50": "1"}
    qc.redis.hdel(qk.can, "old:1:aa")
    burst(qc)
    assert [[r["result"] for r in qc.results(s.id)] for s in subs] == [[0], [1], [2]]
    assert dispatch_is_empty(qc)


def test_a_waiting_one_item_request_has_no_index_entry_and_its_band_counts_it(qc):
    """Waiting packed, a one-item request is in neither reqs nor index: the
    queue's packed hash counts it under its band (store/packed.py). A change
    of priority moves the count, a cancel or a claim counts it out, and
    readers find it where it is, waiting, then held."""
    qk, r = qc.keys.queue("default"), qc.redis
    a, b, c = (qc.submit("default", "echo", [x], priority=p, dedup=False) for x, p in (("a", 10), ("b", 50), ("c", 50)))
    assert r.zcard(qk.index) == 0 and r.hgetall(qk.packed) == {"10": "1", "50": "2"}
    bare = r.hgetall(qc.keys.request(b.id).meta)  # what waiting unindexed implies is left out: lean, state
    assert "lean" not in bare and "state" not in bare and bare["p"] == '"b"'
    assert (qc.status(b.id)["state"], qc.reads.meta(b.id)["lean"]) == ("queued", "1")
    qc.set_priority(a.id, 90)
    assert r.hgetall(qk.packed) == {"90": "1", "50": "2"}
    qc.cancel(c.id)
    assert r.hgetall(qk.packed) == {"90": "1", "50": "1"}
    assert packed.waiting_counts(r, qc.keys, "default") == {90: 1, 50: 1}
    assert claim(qc, "default", "w1", 1) == [f"{a.id}#1"]
    assert r.hgetall(qk.packed) == {"50": "1"} and r.zcard(qk.index) == 0
    assert packed.unindexed(r, qc.keys, "default") == [a.id, b.id]
    assert packed.unindexed(r, qc.keys, "default", counted=False) == [a.id]
    assert set(qc.live_requests("default")) == {a.id, b.id}
    assert packed.oldest_waiting(r, qc.keys, "default", [50]) == int(qc.reads.meta(b.id)["created_at"])
    qc.redis.hdel(qk.held, f"{a.id}#1")  # as if its worker died: the lease brings it back
    qc.redis.zadd(qk.leases, {f"{a.id}#1": 0})
    burst(qc)
    assert [[x["result"] for x in qc.results(s.id)] for s in (a, b)] == [["a"], ["b"]]
    assert dispatch_is_empty(qc) and r.zcard(qk.index) == 0


def test_aging_moves_a_packed_requests_count_with_its_token(qc):
    qk, r = qc.keys.queue("default"), qc.redis
    sub = qc.submit("default", "echo", ["old"], priority=10, dedup=False)
    qc.store.queue.tick("default", 100, 50)  # its clock starts
    time.sleep(0.22)
    qc.store.queue.tick("default", 100, 50)  # 4 intervals waited: 4 levels up
    assert r.hgetall(qk.packed) == {"14": "1"}
    assert claim(qc, "default", "w1", 1) == [f"{sub.id}#1"] and not r.exists(qk.packed)


def test_a_request_packed_by_the_release_before_is_counted_out_without_going_below_none(qc):
    """A release before the counts indexed its packed requests and counted
    none: claiming one takes a count that is not there, which stays at none
    (lua/_common.lua count_packed), and the queue still drains whole."""
    qk, r = qc.keys.queue("default"), qc.redis
    old = qc.submit("default", "echo", ["old"], dedup=False)
    r.zadd(qk.index, {old.id: 1})
    r.hdel(qk.packed, "50")  # as the release before left it
    new = qc.submit("default", "echo", ["new"], dedup=False)
    assert claim(qc, "default", "w1", 1) == [f"{old.id}#1"]
    assert r.hget(qk.packed, "50") is None  # not "-1"... and not "0"
    assert claim(qc, "default", "w1", 1) == [f"{new.id}#1"] and not r.exists(qk.packed)
    r.hdel(qk.held, f"{old.id}#1", f"{new.id}#1")
    r.zadd(qk.leases, {f"{old.id}#1": 0, f"{new.id}#1": 0})
    burst(qc)
    assert [[x["result"] for x in qc.results(s.id)] for s in (old, new)] == [["old"], ["new"]]
    assert dispatch_is_empty(qc)


def test_a_worker_that_dies_between_its_claim_and_its_take_is_recovered(qc):
    """Claimed and never taken, a packed request has no items key yet: the
    dead worker's recovery gives its token back and finds nothing in flight
    (the requeue of a dead worker's items once failed on it, NOGROUP, and
    the worker running the recovery died of it)."""
    qk = qc.keys.queue("default")
    subs = [qc.submit("default", "echo", [x], dedup=False) for x in ("a", "b")]
    assert claim(qc, "default", "ghost:1:aa", 2) == [f"{s.id}#1" for s in subs]
    assert not qc.redis.exists(qc.keys.request(subs[0].id).items)
    register_dead(qc, "ghost:1:aa")
    assert Upkeep(qc, Registry(qc.redis, qc.keys)).recover("ghost:1:aa") == 0
    assert qc.redis.zcard(qk.tokens) == 2 and not qc.redis.hlen(qk.held)
    burst(qc)
    assert [[x["result"] for x in qc.results(s.id)] for s in subs] == [["a"], ["b"]]
    assert dispatch_is_empty(qc)


def test_its_claim_registers_it(qc):
    qk = qc.keys.queue("default")
    sub = qc.submit("default", "echo", ["x"], priority=70, dedup=False)
    assert qc.redis.hget(qk.reqs, sub.id) is None
    assert claim(qc, "default", "w1", 1) == [f"{sub.id}#1"]
    assert qc.redis.hget(qk.reqs, sub.id) == "70|1|1|q"  # as the claim step and tick read it from now on
    assert qc.redis.hget(qk.held, f"{sub.id}#1") == "w1"


def test_only_an_id_made_in_its_queues_slot_can_wait_without_a_reqs_entry(qc):
    """A left-over token of a request with its own slot and no reqs entry is
    a finished request's: the claim drops it, as before packing."""
    qk = qc.keys.queue("default")
    qc.redis.zadd(qk.tokens, {"follow-up-of-something#1": 1})
    assert claim(qc, "default", "w1", 1) == []
    assert qc.redis.zcard(qk.tokens) == 0 and qc.redis.hlen(qk.reqs) == 0 and qc.redis.hlen(qk.held) == 0


def test_a_duplicate_one_item_submission_creates_nothing(qc):
    first = qc.submit("default", "echo", ["same"])
    size = qc.redis.dbsize()
    again = qc.submit("default", "echo", ["same"])
    assert (again.id, again.duplicate) == (first.id, True)
    assert qc.redis.dbsize() == size
    burst(qc)
    assert qc.status(first.id)["state"] == "completed" and dispatch_is_empty(qc)


# -- many priority levels -------------------------------------------------------

def test_a_claim_continues_into_lower_bands_best_first(qc):
    """100 one-item requests over 100 levels: one claim of 32 takes the 32
    best, in priority order, not only the one token of the best band."""
    prios = list(range(100))
    random.Random(3).shuffle(prios)
    by_rid = {qc.submit("default", "echo", [p], priority=p).id: p for p in prios}
    got = claim(qc, "default", "w1", 32)
    assert [by_rid[t.rpartition("#")[0]] for t in got] == list(range(99, 67, -1))
    # a token of a higher band submitted now is taken before every lower one left
    top = qc.submit("default", "echo", ["late"], priority=99)
    got = claim(qc, "default", "w2", 3)
    assert [t.rpartition("#")[0] for t in got][0] == top.id
    assert [by_rid[t.rpartition("#")[0]] for t in got[1:]] == [67, 66]


def test_one_item_requests_over_many_levels_start_in_strict_priority_then_fifo(qc):
    rng = random.Random(11)
    subs = [(qc.submit("default", "echo", [k], priority=rng.randrange(100)), k) for k in range(150)]
    prio = {sub.id: p for sub, p in ((s, qc.status(s.id)["priority"]) for s, _ in subs)}
    seq = {sub.id: k for sub, k in subs}
    burst(qc)
    order = started_order(qc, [s for s, _ in subs])
    assert order == sorted(order, key=lambda rid: (-prio[rid], seq[rid]))
    assert dispatch_is_empty(qc)


# -- the features a one-item request has ------------------------------------------

def test_result_status_and_history_fields_of_a_one_item_request(qc):
    sub = qc.submit("default", "uppercase", ["hello"])
    assert qc.status(sub.id)["state"] == "queued"
    burst(qc)
    st = qc.status(sub.id)
    assert (st["state"], st["total"], st["done"], st["failed"], st["in_flight"]) == ("completed", 1, 1, 0, 0)
    assert st["started_at"] and st["finished_at"] >= st["started_at"]
    (rec,) = list(qc.results(sub.id))
    assert (rec["index"], rec["status"], rec["result"], rec["attempts"]) == (0, "done", "HELLO", 1)
    (item,) = qc.items(sub.id)
    assert (item["payload"], item["status"]) == ("hello", "done")
    assert dispatch_is_empty(qc)


def test_dedup_of_one_item_requests_while_pending_only(qc):
    a = qc.submit("default", "echo", ["same"])
    b = qc.submit("default", "echo", ["same"])
    assert b.duplicate and b.id == a.id
    other = qc.submit("default", "echo", ["other"])
    assert not other.duplicate and other.id != a.id
    burst(qc)
    c = qc.submit("default", "echo", ["same"])
    assert not c.duplicate and c.id != a.id


def test_delay_then_run(qc):
    sub = qc.submit("default", "echo", ["later"], delay=0.4)
    t0 = time.time()
    assert qc.status(sub.id)["state"] == "scheduled"
    wait_for(lambda: burst(qc) and qc.status(sub.id)["state"] == "completed", 10)
    (rec,) = list(qc.results(sub.id))
    assert rec["started_at"] >= t0 + 0.35


def test_expired_one_item_request_never_runs(qc):
    sub = qc.submit("default", "echo", ["stale"], expires_in=0.05)
    time.sleep(0.2)
    burst(qc)
    st = qc.status(sub.id)
    assert (st["state"], st["expired"], st["done"]) == ("expired", 1, 0)
    (rec,) = list(qc.results(sub.id))
    assert rec["status"] == "expired" and "started_at" not in rec
    assert dispatch_is_empty(qc)


def test_cancel_a_queued_one_item_request(qc):
    sub = qc.submit("default", "echo", ["x"])
    qc.cancel(sub.id)
    burst(qc)
    st = qc.status(sub.id)
    assert (st["state"], st["done"]) == ("cancelled", 0)
    assert [r["status"] for r in qc.results(sub.id)] == ["cancelled"]
    assert dispatch_is_empty(qc)
    again = qc.submit("default", "echo", ["x"])  # its de-dup claim went with it
    assert not again.duplicate


def finished_events(pubsub) -> list[dict]:
    out = []
    while (m := pubsub.get_message(timeout=0.2)) is not None:
        if m["type"] == "message" and (e := json.loads(m["data"]))["type"] == "finished":
            out.append(e)
    return out


@pytest.mark.parametrize("retried", [False, True], ids=["done-at-once", "done-after-a-dead-letter"])
def test_a_one_item_request_done_closes_whole_announced_and_expiring(qc, r, tmp_path, retried):
    """The close of a lean request whose item is done (ack's one read and one
    write of the meta): the meta reads as any finished request's, the event
    carries its counters, every key it keeps expires, and none is left without."""
    switch = tmp_path / "fail"  # flaky_switch fails while it exists
    if retried:
        switch.write_text("on")
    qc.define_queue("close", QueueConfig(backoff_seconds=0.0, max_attempts=1, retention_seconds=60))
    pubsub = r.pubsub()
    pubsub.subscribe(qc.keys.events_all)
    wait_for(lambda: pubsub.get_message(timeout=0.1))  # the subscribe confirmation
    sub = qc.submit("close", "flaky_switch" if retried else "echo", [str(switch)], priority=61, concurrency=3)
    burst(qc, ["close"])
    if retried:
        assert qc.status(sub.id)["state"] == "failed"
        switch.unlink()
        assert qc.retry_dead(sub.id) == 1
        burst(qc, ["close"])
    events = finished_events(pubsub)
    pubsub.close()
    st = qc.status(sub.id)
    assert (st["id"], st["state"], st["total"], st["done"], st["failed"], st["dead"]) == (
        sub.id, "completed", 1, 1, 0, 0)
    assert st["finished_at"] and st["started_at"]
    last = events[-1]
    assert {k: last[k] for k in ("id", "queue", "state", "total", "done", "failed", "expired", "priority",
                                 "concurrency")} == dict(id=sub.id, queue="close", state="completed", total=1,
                                                         done=1, failed=0, expired=0, priority=61, concurrency=3)
    rk = qc.keys.request(sub.id)
    for key in (rk.meta, rk.items, rk.results):
        assert 0 < r.pttl(key) <= 60_000, key
    assert not r.exists(rk.leases) and not r.exists(rk.dead)
    assert dispatch_is_empty(qc, "close")
    assert list(r.scan_iter(f"*{sub.id}*")) and all(r.pttl(k) > 0 for k in r.scan_iter(f"*{sub.id}*"))


def test_dead_letter_then_retry_of_a_one_item_request(qc, tmp_path):
    switch = tmp_path / "fail"
    switch.write_text("on")
    qc.define_queue("dl", QueueConfig(backoff_seconds=0.0, max_attempts=2))
    sub = qc.submit("dl", "flaky_switch", [str(switch)])
    burst(qc, ["dl"])
    st = qc.status(sub.id)
    assert (st["state"], st["failed"], st["dead"]) == ("failed", 1, 1)
    (dead,) = qc.dead_letters(sub.id)
    assert dead["attempts"] == 2 and "switch is on" in dead["error"]
    switch.unlink()
    assert qc.retry_dead(sub.id) == 1
    burst(qc, ["dl"])
    st = qc.status(sub.id)
    assert (st["state"], st["done"], st["failed"], st["dead"]) == ("completed", 1, 0, 0)
    (rec,) = list(qc.results(sub.id))
    assert (rec["status"], rec["result"]) == ("done", "ok")
    assert dispatch_is_empty(qc, "dl")


def test_a_lease_that_runs_out_redelivers_with_an_attempt_counted(qc):
    sub = qc.submit("fast", "stall_first", [1.6])  # lease 1 s: attempt 1 outlives it
    w = claim(qc, "fast", "ghost", 1)  # a worker that claims and then dies
    assert len(w) == 1
    rk = qc.keys.request(sub.id)
    cfg = qc.queue_config("fast")
    got = qc.scripts("take", rk.all(), ["ghost", cfg.lease_ms, cfg.max_attempts, cfg.retention_ms, "", 1])
    assert len(got) == 11  # one item handed out, never acknowledged
    wait_for(lambda: burst(qc, ["fast"]) and qc.status(sub.id)["state"] == "completed", 20)
    (rec,) = list(qc.results(sub.id))
    assert rec["status"] == "done" and rec["attempts"] == 2
    assert dispatch_is_empty(qc, "fast")


# -- real worker processes, SIGKILL ------------------------------------------------

@pytest.mark.slow
def test_sigkill_at_random_instants_loses_no_one_item_request(qc, workers):
    qc.define_queue("crash", QueueConfig(lease_seconds=2))
    subs = [qc.submit("crash", "sleep", [0.002], dedup=False, priority=k % 100) for k in range(600)]
    kill_at_random(workers, "crash", seed=5, kills=5, low=0.2, high=0.5)

    def all_done():
        return all(s and s["state"] == "completed" for s in qc.statuses([s.id for s in subs]))

    wait_for(all_done, 90, interval=0.3, message=workers.logs())
    for sub in subs:
        (rec,) = list(qc.results(sub.id))
        assert rec["status"] == "done"
        assert qc.redis.hkeys(qc.keys.request(sub.id).results) in (["0"], ["0", "a:0"], ["a:0", "0"])  # and its attempts
    wait_for(lambda: dispatch_is_empty(qc, "crash"), 10)


@pytest.mark.slow
def test_chaos_retries_and_sigkills_leave_every_one_item_request_with_one_outcome(qc, workers):
    """Handlers that fail twice, workers killed at random: every request ends
    completed (third attempt) or, if kills ate its attempts, failed with a dead
    letter; one result each, nothing left in dispatch."""
    qc.define_queue("chaos", QueueConfig(lease_seconds=1.5, backoff_seconds=0.0, max_attempts=3))
    subs = [qc.submit("chaos", "fail_until_third", [k], dedup=False, priority=k % 7) for k in range(300)]
    kill_at_random(workers, "chaos", seed=13, kills=4, low=0.2, high=0.5)
    rids = [s.id for s in subs]
    wait_for(lambda: all(s and s["state"] in ("completed", "failed") for s in qc.statuses(rids)), 90,
             interval=0.3, message=workers.logs())
    states = {"completed": 0, "failed": 0}
    for rid in rids:
        st = qc.status(rid)
        states[st["state"]] += 1
        (rec,) = list(qc.results(rid))
        outcomes = [a["outcome"] for a in attempts.timeline(attempts.stored(qc.redis, qc.keys, rid, 0), rec)]
        if st["state"] == "completed":
            assert (rec["status"], rec["result"], rec["attempts"]) == ("done", "ok", 3)
        else:  # failed only because a kill ate one of its three attempts
            assert st["dead"] == 1 and rec["status"] == "failed"
            assert "lease-expired" in outcomes, (rid, outcomes)
    assert states["completed"] > 0, states
    wait_for(lambda: dispatch_is_empty(qc, "chaos"), 10)


def test_the_fair_share_leaves_a_worker_of_fast_items_a_batch(qc):
    """Ten tokens over eight workers: a fair share is two tokens, but a worker
    of fast items asks for at least four (claims.LEAST_FAST_SHARE), so it
    runs a batch per round trip rather than an item per round trip."""
    sub = qc.submit("default", "echo", list(range(100)), concurrency=10)
    assert len(claim(qc, "default", "w1", 32, workers=8)) == 2
    assert len(claim(qc, "default", "w2", 32, workers="8/4")) == 4
    assert len(claim(qc, "default", "w3", 32, workers="8/4")) == 4  # 10 in play: the share is not what is left
    assert claim(qc, "default", "w4", 32, workers="8/4") == [] and qc.status(sub.id)["total"] == 100


def test_finishes_reported_are_the_statuses_redis_holds(qc):
    """What a worker's reporter hands on for the requests it saw finish (one
    item done, chained, failed, many items) is exactly the status read from
    Redis afterwards."""
    qc.define_queue("told", QueueConfig(backoff_seconds=0.0, max_attempts=1, retention_seconds=60))
    subs = [qc.submit("told", "echo", [n], priority=40 + n, concurrency=2, dedup_key=f"k{n}") for n in range(5)]
    subs.append(qc.submit("told", "echo", ["then"], then={"processor": "echo"}))
    subs.append(qc.submit("told", "fail", ["boom"]))  # closes failed
    subs.append(qc.submit("told", "echo", ["a", "b", "c"]))  # many items
    seen = []
    burst(qc, ["told"], on_finish_many=seen.extend)
    reported = {st["id"]: st for st in seen}
    assert set(reported) >= {s.id for s in subs}
    assert qc.finished_statuses([s.id for s in subs]) == [reported[s.id] for s in subs]
    states = [reported[s.id]["state"] for s in subs]
    assert states == ["completed"] * 6 + ["failed", "completed"]
    assert [reported[s.id]["dedup_key"] for s in subs[:5]] == [f"k{n}" for n in range(5)]
