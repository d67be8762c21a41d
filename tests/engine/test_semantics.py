"""DESIGN.md's semantics, in-process: priorities and FIFO (1), concurrency
limits (2), leases and dead letters (4), delays and expiry (7), live priority
and concurrency changes (8), pub/sub (9), plus pause, cancel and aging."""
import json
import time
from collections import Counter

import pytest

from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.errors import QueueError
from tests.engine_helpers import Threads, burst, dispatch_is_empty, max_overlap, wait_for

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)

pytestmark = pytest.mark.timeout(90)


def run_order(qc, subs):
    """(request label, index) of every item, in the order they started."""
    rows = []
    for label, sub in subs.items():
        rows += [(rec["started_at"], label, rec["index"]) for rec in qc.results(sub.id)]
    return [(label, i) for _, label, i in sorted(rows)]


# -- 1. strict priority, FIFO within a priority, fair round-robin -------------

def test_strict_priority_then_fifo_within_a_priority(qc):
    subs = {
        "low": qc.submit("default", "echo", ["l0", "l1"], priority=10, concurrency=1),
        "high": qc.submit("default", "echo", ["h0", "h1"], priority=90, concurrency=1),
        "a": qc.submit("default", "echo", ["a0", "a1"], priority=50, concurrency=1),
        "b": qc.submit("default", "echo", ["b0", "b1"], priority=50, concurrency=1),
    }
    burst(qc)
    order = run_order(qc, subs)
    # a claim continues into a lower band only once no token of a higher band waits: the
    # low request's token is taken after a's and b's (which its worker may still hold)
    assert order[:2] == [("high", 0), ("high", 1)]
    assert [x for x in order if x[0] != "low"][2:] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert order.index(("low", 0)) > max(order.index(("a", 0)), order.index(("b", 0)))
    assert order.index(("low", 0)) < order.index(("low", 1))
    assert dispatch_is_empty(qc)


def test_a_small_request_is_not_held_back_by_a_huge_one_of_equal_priority(qc):
    subs = {"big": qc.submit("default", "echo", list(range(2000)), concurrency=4),
            "small": qc.submit("default", "echo", list(range(10)), concurrency=4)}
    burst(qc)
    order = run_order(qc, subs)
    last_small = max(i for i, (label, _) in enumerate(order) if label == "small")
    assert last_small < 40  # round-robin: ~2 big items per small item, not 2000


def test_retried_items_keep_their_request_priority(qc):
    qc.define_queue("retry", QueueConfig(backoff_seconds=0.0, max_attempts=3))
    subs = {"flaky": qc.submit("retry", "fail_until_third", ["x"], priority=90, concurrency=1),
            "low": qc.submit("retry", "echo", list(range(30)), priority=10, concurrency=1)}
    burst(qc, ["retry"])
    order = run_order(qc, subs)
    assert order.index(("flaky", 0)) < 5  # its third attempt did not wait behind the low request
    assert list(qc.results(subs["flaky"].id))[0]["attempts"] == 3


def test_aging_lifts_a_starving_request(qc):
    subs = {"busy": qc.submit("default", "sleep", [0.01] * 150, priority=90, concurrency=1),
            "starved": qc.submit("default", "echo", ["s"], priority=5, concurrency=1)}
    burst(qc, aging_seconds=0.01)  # 85 levels in under a second of waiting
    order = run_order(qc, subs)
    assert order.index(("starved", 0)) < 120  # without aging it would run last (index 150)


# -- 2. concurrency limits ----------------------------------------------------

def test_concurrency_limit_holds_across_workers(qc):
    sub = qc.submit("default", "sleep", [0.03] * 40, concurrency=3)
    other = qc.submit("default", "sleep", [0.03] * 20, concurrency=1)
    with Threads(qc, 6):
        pass
    assert max_overlap(list(qc.results(sub.id))) == 3
    assert max_overlap(list(qc.results(other.id))) == 1
    assert dispatch_is_empty(qc)


# -- 4. leases, redelivery, attempts, dead letters ----------------------------

def test_an_item_longer_than_its_lease_runs_once_while_its_worker_lives(qc):
    """The worker renews the lease of a running item: the second worker never
    gets it (lease 1 s, item 2.2 s). Redelivery after a death or a freeze is
    in test_engine_crash.py."""
    sub = qc.submit("fast", "stall_first", [2.2])
    with Threads(qc, 2, ["fast"]):
        pass
    (rec,) = list(qc.results(sub.id))
    assert rec["status"] == "done" and rec["result"] == 1 and rec["attempts"] == 1
    assert qc.status(sub.id)["done"] == 1


def test_a_handler_can_extend_its_lease(qc):
    sub = qc.submit("fast", "extend_and_sleep", [1.6])
    with Threads(qc, 2, ["fast"]):
        pass
    (rec,) = list(qc.results(sub.id))
    assert rec["result"] == 1 and rec["attempts"] == 1


def test_failures_retry_with_backoff_then_succeed(qc):
    qc.define_queue("retry", QueueConfig(backoff_seconds=0.05, max_attempts=3))
    sub = qc.submit("retry", "fail_until_third", ["x"])
    burst(qc, ["retry"])
    (rec,) = list(qc.results(sub.id))
    assert (rec["status"], rec["attempts"], rec["result"]) == ("done", 3, "ok")


def test_after_max_attempts_an_item_is_a_dead_letter_and_can_be_retried(qc, tmp_path):
    switch = tmp_path / "on"
    switch.write_text("1")
    qc.define_queue("retry", QueueConfig(backoff_seconds=0.01, max_attempts=2))
    sub = qc.submit("retry", "flaky_switch", [str(switch), "/nonexistent"])
    burst(qc, ["retry"])
    st = qc.status(sub.id)
    assert (st["state"], st["done"], st["failed"], st["dead"]) == ("failed", 1, 1, 1)
    (dead,) = qc.dead_letters(sub.id)
    assert dead["index"] == 0 and "switch is on" in dead["error"] and "Traceback" in dead["traceback"]
    assert dead["attempts"] == 2
    switch.unlink()
    assert qc.retry_dead(sub.id) == 1
    assert qc.status(sub.id)["state"] == "queued"
    burst(qc, ["retry"])
    st = qc.status(sub.id)
    assert (st["state"], st["done"], st["failed"], st["dead"]) == ("completed", 2, 0, 0)
    assert [r["status"] for r in qc.results(sub.id)] == ["done", "done"]


def test_an_unknown_processor_waits_for_a_worker_that_has_it(qc):
    """A worker that cannot run an item leaves it untouched (tests/test_engine_routing.py)."""
    sub = qc.submit("default", "no_such_processor", ["x"])
    burst(qc)
    st = qc.status(sub.id)
    assert (st["state"], st["failed"], st["dead"]) == ("queued", 0, 0)
    assert [r["status"] for r in qc.results(sub.id)] == ["pending"]
    assert qc.lean_item(sub.id)["d"] == "0"  # no delivery counted


def test_results_that_are_not_json_fail_cleanly(qc, monkeypatch):
    monkeypatch.setattr("queueadmin.core.engine.runtime.processors.echo", lambda item: {1, 2})
    sub = qc.submit("default", "echo", ["x"])
    burst(qc)
    (rec,) = list(qc.results(sub.id))
    assert rec["status"] == "failed" and "JSON" in rec["error"]


# -- 7. delays and expiry -----------------------------------------------------

def test_a_delayed_request_starts_no_earlier_than_its_time(qc):
    sub = qc.submit("default", "echo", ["x"], delay=1.2)
    assert sub.scheduled and qc.status(sub.id)["state"] == "scheduled"
    burst(qc)  # burst work ignores what is not due within a second
    assert qc.status(sub.id)["done"] == 0
    time.sleep(0.5)
    burst(qc)  # due within a second now: the worker waits for it
    st = qc.status(sub.id)
    (rec,) = list(qc.results(sub.id))
    assert st["state"] == "completed"
    assert rec["started_at"] >= st["not_before"] - 0.002
    assert st["not_before"] - st["created_at"] == pytest.approx(1.2, abs=0.01)


def test_expired_items_are_marked_expired_and_never_run(qc):
    qc.set_paused("default", True)
    sub = qc.submit("default", "echo", list(range(5)), expires_in=0.2)
    time.sleep(0.3)
    qc.set_paused("default", False)
    burst(qc)
    st = qc.status(sub.id)
    assert (st["state"], st["expired"], st["done"]) == ("expired", 5, 0)
    assert {r["status"] for r in qc.results(sub.id)} == {"expired"}
    assert all("worker" not in r for r in qc.results(sub.id))


# -- 8. live priority and concurrency changes ---------------------------------

def test_raising_a_running_requests_priority_serves_it_first(qc):
    a = qc.submit("default", "sleep", [0.02] * 30, priority=10, concurrency=2)
    b = qc.submit("default", "sleep", [0.02] * 30, priority=50, concurrency=2, dedup=False)
    assert a.id != b.id
    with Threads(qc, 2):
        wait_for(lambda: qc.status(b.id)["done"] >= 4, message="b under way")
        qc.set_priority(a.id, 90)  # while b's tokens are held
        changed = time.time()
    a_rec, b_rec = list(qc.results(a.id)), list(qc.results(b.id))
    a_last_start = max(r["started_at"] for r in a_rec)
    b_after = [r for r in b_rec if r["started_at"] > changed + 0.05]
    assert b_after and min(r["started_at"] for r in b_after) > a_last_start
    assert qc.status(a.id)["priority"] == 90
    assert dispatch_is_empty(qc)


def test_changing_concurrency_applies_to_items_not_yet_started(qc):
    sub = qc.submit("default", "sleep", [0.03] * 60, concurrency=1)
    with Threads(qc, 4):
        wait_for(lambda: qc.status(sub.id)["done"] >= 5)
        qc.set_concurrency(sub.id, 4)
        raised = time.time()
        wait_for(lambda: qc.status(sub.id)["done"] >= 40)
        qc.set_concurrency(sub.id, 2)
        lowered = time.time()
    recs = list(qc.results(sub.id))
    before = [r for r in recs if r["finished_at"] < raised]
    middle = [r for r in recs if r["started_at"] > raised + 0.05 and r["finished_at"] < lowered]
    after = [r for r in recs if r["started_at"] > lowered + 0.05]
    assert max_overlap(before) == 1
    assert max_overlap(middle) == 4
    assert after and max_overlap(after) <= 2
    assert dispatch_is_empty(qc)


def test_priority_change_of_a_scheduled_request(qc):
    sub = qc.submit("default", "echo", ["x"], delay=0.3, priority=20)
    qc.set_priority(sub.id, 80)
    burst(qc)
    st = qc.status(sub.id)
    assert (st["state"], st["priority"]) == ("completed", 80)


def test_a_change_that_meets_a_request_expired_meanwhile_leaves_no_key_behind(qc, monkeypatch):
    """The change's script ran while the request lived; it finished and its
    keys expired before the meta was written: no meta of one field, without
    a TTL, is made again."""
    sub = qc.submit("default", "echo", ["a", "b"], dedup=False)
    meta = qc.keys.request(sub.id).meta
    adjust = qc.store.queue.adjust

    def then_expired(*args, **kw):
        answer = adjust(*args, **kw)
        qc.redis.delete(meta)  # as the end of its retention would
        return answer

    monkeypatch.setattr(qc.store.queue, "adjust", then_expired)
    qc.set_priority(sub.id, 80)
    assert qc.redis.exists(meta) == 0
    with pytest.raises(QueueError, match="unknown request"):  # and the next change finds it gone
        qc.set_concurrency(sub.id, 3)


# -- 9. pub/sub ---------------------------------------------------------------

def test_progress_and_completion_are_published(qc, r):
    pubsub = r.pubsub()
    pubsub.subscribe(qc.keys.events_all)
    wait_for(lambda: pubsub.get_message(timeout=0.1))  # the subscribe confirmation
    sub = qc.submit("default", "echo", list(range(3)))
    burst(qc)
    messages = []
    while (m := pubsub.get_message(timeout=0.2)) is not None:
        if m["type"] == "message":
            messages.append(json.loads(m["data"]))
    pubsub.close()
    mine = [m for m in messages if m["id"] == sub.id]
    assert mine[0]["type"] == "progress"
    assert mine[-1] == {**mine[-1], "type": "finished", "state": "completed", "done": 3, "total": 3}


# -- pause, cancel -----------------------------------------------------------

def test_a_paused_queue_runs_nothing_until_resumed(qc):
    qc.set_paused("default", True)
    sub = qc.submit("default", "echo", ["x"])
    burst(qc)
    assert qc.status(sub.id)["done"] == 0 and qc.queue_config("default").paused
    qc.set_paused("default", False)
    burst(qc)
    assert qc.status(sub.id)["state"] == "completed"


def test_a_one_item_request_cancelled_before_its_first_take_reads_as_any_other(qc, r):
    """Waiting, it is packed (engine/store/packed.py); cancelled, it is unpacked:
    the event names it, its item and counters read back, and nothing runs it."""
    pubsub = r.pubsub()
    pubsub.subscribe(qc.keys.events_all)
    wait_for(lambda: pubsub.get_message(timeout=0.1))  # the subscribe confirmation
    sub = qc.submit("default", "echo", [{"n": 7}], dedup_key="once")
    qc.cancel(sub.id)
    burst(qc)
    finished = []
    while (m := pubsub.get_message(timeout=0.2)) is not None:
        if m["type"] == "message":
            finished += [e for e in [json.loads(m["data"])] if e["type"] == "finished"]
    pubsub.close()
    assert finished == [{**finished[0], "id": sub.id, "state": "cancelled", "total": 1, "done": 0}]
    st = qc.status(sub.id)
    assert (st["id"], st["state"], st["total"], st["done"], st["dedup_key"]) == (sub.id, "cancelled", 1, 0, "once")
    (item,) = qc.items(sub.id)
    assert (item["payload"], item["status"]) == ({"n": 7}, "pending")
    assert [rec["status"] for rec in qc.results(sub.id)] == ["cancelled"]
    assert qc.submit("default", "echo", [{"n": 7}], dedup_key="once").id != sub.id  # its key is free again


def test_cancel_stops_items_not_yet_started(qc):
    sub = qc.submit("default", "echo", list(range(10)))
    qc.cancel(sub.id)
    burst(qc)
    st = qc.status(sub.id)
    assert (st["state"], st["done"]) == ("cancelled", 0)
    assert {r["status"] for r in qc.results(sub.id)} == {"cancelled"}
    assert dispatch_is_empty(qc)


def test_cancel_stops_running_items_and_skips_the_rest(qc):
    sub = qc.submit("default", "sleep", [30] * 10, concurrency=2)
    started = time.monotonic()
    with Threads(qc, 2):
        wait_for(lambda: qc.status(sub.id)["in_flight"] == 2)
        qc.cancel(sub.id)
    assert time.monotonic() - started < 15  # the 30 s sleeps were stopped, not waited for
    results = list(qc.results(sub.id))
    assert [r["status"] for r in results].count("cancelled") == 10
    stopped = [r for r in results if r.get("error", "").startswith("Cancelled")]
    assert len(stopped) == 2 and qc.status(sub.id)["failed"] == 0
    assert dispatch_is_empty(qc)


def test_finished_request_keys_expire_after_retention(qc, r):
    qc.define_queue("short", QueueConfig(retention_seconds=1))
    sub = qc.submit("short", "echo", ["x"])
    burst(qc, ["short"])
    ttl = r.pttl(qc.keys.request(sub.id).meta)
    assert 0 < ttl <= 1000


def test_items_waiting_in_a_batch_behind_a_slow_one_keep_their_lease(qc):
    """Fast items are claimed in batches; one slow item must not let the
    leases of the items queued behind it in the same batch run out."""
    items = [0.0] * 40 + [1.6] + [0.0] * 40
    sub = qc.submit("fast", "sleep", items, concurrency=8)
    with Threads(qc, 2, ["fast"]):
        pass
    recs = list(qc.results(sub.id))
    assert all(r["status"] == "done" for r in recs)
    assert [r["index"] for r in recs if r["attempts"] > 1] in ([], [40])


def test_dead_letters_can_be_discarded(qc):
    qc.define_queue("once", QueueConfig(max_attempts=1))
    sub = qc.submit("once", "fail", ["a", "b"])
    burst(qc, ["once"])
    assert qc.status(sub.id)["dead"] == 2
    first = qc.dead_letters(sub.id)[0]
    assert qc.discard_dead(sub.id, [first["entry"]]) == 1
    assert qc.status(sub.id)["dead"] == 1
    assert qc.discard_dead(sub.id) == 1 and qc.dead_letters(sub.id) == []
    recs = list(qc.results(sub.id))
    assert all(r["status"] == "failed" and r["discarded"] for r in recs)
    assert qc.retry_dead(sub.id) == 0  # nothing left to retry


def test_a_scheduled_request_can_run_now(qc):
    sub = qc.submit("default", "echo", ["x"], delay=3600)
    assert qc.run_now("default", sub.id)
    burst(qc)
    assert qc.status(sub.id)["state"] == "completed"
    assert not qc.run_now("default", sub.id)


def test_a_fast_request_spreads_over_the_workers(qc):
    """Batching claims many tokens at once, but never all of them: every
    worker gets a share of one request's items."""
    sub = qc.submit("default", "echo", list(range(3000)), concurrency=16)
    with Threads(qc, 3):
        pass
    per_worker = Counter(r["worker"] for r in qc.results(sub.id))
    assert len(per_worker) == 3 and min(per_worker.values()) > 150, per_worker
