"""An item's attempts, as real worker processes record them (core/engine/
attempts.py): a retried-then-dead item has each attempt in order with its
outcome, worker and reason; a SIGKILLed worker's attempt shows as its lease
expiring; an item done at once costs no stored line; the lines stay bounded."""
import json
import time

import pytest

from queueadmin.core.engine import attempts
from queueadmin.core.engine.config import QueueConfig
from tests.engine_helpers import Threads, burst, wait_for

pytestmark = [pytest.mark.timeout(120)]


def timeline(qc, rid, index=0):
    (record,) = [r for r in qc.results(rid) if r["index"] == index]
    return attempts.timeline(attempts.stored(qc.redis, qc.keys, rid, index), record)


def worker_ids(qc, proc):
    """The ids the worker process registered (one per worker it runs)."""
    return [w for w in qc.redis.zrange(qc.keys.workers, 0, -1) if w.split(":")[1] == str(proc.pid)]


@pytest.mark.slow
def test_a_real_workers_retried_then_dead_item_has_every_attempt_in_order(qc, workers):
    qc.define_queue("flaky", QueueConfig(max_attempts=3, backoff_seconds=0.05))
    stream = qc.submit("flaky", "fail", ["a", "b"], dedup=False)  # a request with its own stream
    lean = qc.submit("flaky", "fail", ["c"], dedup=False)  # a one-item request in the queue's slot
    proc = workers.start("flaky")
    wait_for(lambda: all(qc.status(s.id)["state"] == "failed" for s in (stream, lean)), 60, message=workers.logs())
    (wid,) = worker_ids(qc, proc)
    for rid, index in ((stream.id, 0), (stream.id, 1), (lean.id, 0)):
        shown = timeline(qc, rid, index)
        assert [(a["n"], a["outcome"]) for a in shown] == [(1, "retried"), (2, "retried"), (3, "dead")]
        assert {a["worker"] for a in shown} == {wid}
        assert all(a["host"] and a["pid"] == proc.pid for a in shown)
        assert all(a["why"].startswith("RuntimeError: fail processor always fails") for a in shown)
        taken = [a["taken_at"] for a in shown]
        assert taken == sorted(taken) and all(a["ran_for"] >= 0 for a in shown)
        assert taken[1] - taken[0] >= 0.05  # the backoff between attempts


@pytest.mark.slow
def test_a_sigkilled_workers_attempt_shows_its_lease_expiring(qc, workers):
    qc.define_queue("crash", QueueConfig(lease_seconds=1))
    stream = qc.submit("crash", "sleep", [1.5, 1.5], dedup=False)
    lean = qc.submit("crash", "sleep", [1.5], dedup=False)
    victim = workers.start("crash", 1, False, "", "--threads", "4")
    rids = {stream.id, lean.id}

    def all_running():
        return sum(qc.status(r)["in_flight"] for r in rids) == 3 and worker_ids(qc, victim)

    (dead_wid,) = wait_for(all_running, 30, interval=0.01, message=workers.logs())
    time.sleep(0.2)  # inside the items' first attempt
    workers.kill(victim)
    heir = workers.start("crash", 1, False, "", "--threads", "4")
    wait_for(lambda: all(qc.status(r)["state"] == "completed" for r in rids), 60, message=workers.logs())
    (heir_wid,) = worker_ids(qc, heir)
    for rid, index in ((stream.id, 0), (stream.id, 1), (lean.id, 0)):
        first, second = timeline(qc, rid, index)
        assert (first["n"], first["outcome"], first["worker"], first["pid"]) == (1, "lease-expired", dead_wid,
                                                                                victim.pid)
        assert "lease ran out" in first["why"] and first["taken_at"] and first["ran_for"] >= 0
        assert (second["n"], second["outcome"], second["worker"]) == (2, "done", heir_wid)
        assert second["taken_at"] >= first["taken_at"] and second["ran_for"] >= 1.4


def test_an_item_done_at_once_stores_no_attempt_line_and_shows_its_record(qc):
    sub = qc.submit("default", "uppercase", ["x"], dedup=False)
    burst(qc)
    assert attempts.stored(qc.redis, qc.keys, sub.id, 0) is None  # nothing beyond the result record
    (only,) = timeline(qc, sub.id)
    assert (only["n"], only["outcome"], only["why"]) == (1, "done", "")


def test_attempts_are_bounded_and_expire_with_the_request(qc):
    qc.define_queue("many", QueueConfig(max_attempts=14, backoff_seconds=0, retention_seconds=60))
    sub = qc.submit("many", "fail", ["a", "b"], dedup=False)
    deadline = time.monotonic() + 60
    while qc.status(sub.id)["state"] != "failed" and time.monotonic() < deadline:
        burst(qc, ["many"])
    raw = attempts.stored(qc.redis, qc.keys, sub.id, 0)
    lines = raw.split("\n")
    assert len(lines) == attempts.KEPT  # the last ten of fourteen
    assert [json.loads(x)["n"] for x in lines] == list(range(5, 15))
    assert json.loads(lines[-1])["o"] == "dead"
    rk = qc.keys.request(sub.id)
    assert 0 < qc.redis.pttl(rk.results) <= 60_000  # expires with the request's results
    per_attempt = qc.redis.memory_usage(rk.results) / 20  # two items, ten lines each (and two records)
    assert per_attempt < 400, per_attempt


def test_how_a_line_names_an_attempts_end_and_unreadable_lines_are_skipped():
    stopped = json.loads(attempts.line(2, "h:1:ab", 100.0, 101.5, "retry", "Stopped: stopped by an operator\nmore",
                                       stop_reason="stopped"))
    assert (stopped["n"], stopped["o"], stopped["r"], stopped["y"]) == (2, "stopped", 1500, "Stopped: stopped by an operator")
    assert attempts.line(1, "h:1:ab", 100.0, 101.0, "done", None) == ""
    assert json.loads(attempts.line(3, "w", 0, 1, "dead", "x" * 1000))["y"].endswith("…")
    raw = "not json\n" + attempts.line(1, "host:7:ff", 5.0, 6.0, "retry", "E") + "\n[1]\n{\"n\": \"2\"}"
    (only,) = attempts.parse(raw)
    assert (only["n"], only["host"], only["pid"], only["outcome"], only["taken_at"]) == (1, "host", 7, "retried", 5.0)
    assert attempts.timeline(None, {"status": "pending"}) == []
    running = attempts.timeline(None, {}, {"worker": "h:2:cd", "attempt": 1, "taken_at": 9.0})
    assert [(a["n"], a["outcome"], a["pid"]) for a in running] == [(1, "running", 2)]


def test_an_item_stopped_by_an_operator_shows_a_stopped_attempt(qc):
    qc.define_queue("stoppable", QueueConfig(max_attempts=1))
    sub = qc.submit("stoppable", "sleep", [30], dedup=False)
    with Threads(qc, 1, ["stoppable"]):
        entry = wait_for(lambda: next((i["entry"] for i in qc.items(sub.id) if i["status"] == "running"), None), 20)
        assert qc.stop_item(sub.id, entry)
        wait_for(lambda: qc.status(sub.id)["state"] == "failed", 30)
    (only,) = timeline(qc, sub.id)
    assert (only["n"], only["outcome"]) == (1, "stopped")
    assert only["why"].startswith("Stopped") and only["ran_for"] < 10
