"""No item's data kills a worker (issue 20, DESIGN.md semantics 14): a result
nested past Python's recursion limit, NaN, a set, a lone surrogate, a cycle,
an exception whose text raises, SystemExit, a logged lone surrogate. Each
fails its own item with a clear error under the queue's retry policy; the
worker lives on and every other item completes. Real redis-server, real
worker processes (and the in-process worker the engine tests use)."""
from __future__ import annotations

import json

import pytest

from queueadmin.core.engine.config import QueueConfig
from tests.engine_helpers import burst, wait_for

POISONS = ["deep", "nan", "set", "surrogate", "cycle", "unprintable", "exit"]
WHY = {
    "deep": "the result cannot be stored: it is nested too deeply (more than 64 levels",
    "nan": "the result cannot be stored: it holds NaN or Infinity",
    "set": "the result cannot be stored: it cannot be stored as JSON",
    "surrogate": "the result cannot be stored: it is not valid Unicode text",
    "cycle": "the result cannot be stored: it cannot be stored as JSON: Circular reference",
    "unprintable": "_Unprintable: (its message could not be made)",
    "exit": "SystemExit: 2",
}


def results(qc, rid) -> dict:
    return {r["index"]: r for r in qc.results(rid)}


def test_poisoned_results_fail_their_items_and_the_in_process_worker_lives(qc):
    qc.define_queue("p", QueueConfig(max_attempts=2, backoff_seconds=0.01))
    items = ["ok", *POISONS, "log", "fine"]
    rid = qc.submit("p", "poison", items).id
    w = burst(qc, ["p"])
    assert qc.status(rid)["state"] == "failed"
    got = results(qc, rid)
    for i, item in enumerate(items):
        if item in WHY:
            assert got[i]["status"] == "failed" and got[i]["attempts"] == 2, got[i]  # retried, then dead
            assert WHY[item] in got[i]["error"], (item, got[i]["error"])
    assert got[0]["result"] == "ok" and got[len(items) - 1]["result"] == "fine"
    assert got[items.index("log")]["status"] == "done" and "\\ud800" in got[items.index("log")]["log"]
    assert w.failed == 2 * len(POISONS) and w.processed == 3
    assert {d["index"] for d in qc.dead_letters(rid)} == {items.index(p) for p in POISONS}


def test_a_result_5000_deep_does_not_kill_worker_processes(qc, workers):
    """Two worker processes; one request of poisoned results beside another
    user's request: both workers live on, the other request completes, the
    poisoned items are dead letters with their reason after max attempts."""
    qc.define_queue("p", QueueConfig(max_attempts=3, backoff_seconds=0.01, lease_seconds=2.0))
    bad = qc.submit("p", "poison", ["deep"] * 4 + ["nan"]).id
    good = qc.submit("p", "echo", [f"x{i}" for i in range(50)], dedup=False).id
    procs = [workers.start("p", name=f"w{n}") for n in range(2)]
    wait_for(lambda: all(qc.status(r)["state"] in ("completed", "failed") for r in (bad, good)), 60,
             message=workers.logs() if hasattr(workers, "logs") else "both requests to finish")
    assert all(p.poll() is None for p in procs), "a worker process died"
    assert qc.status(good)["state"] == "completed" and qc.status(good)["done"] == 50
    got = results(qc, bad)
    assert all(r["status"] == "failed" and r["attempts"] == 3 for r in got.values()), got
    assert "nested too deeply" in got[0]["error"] and "NaN or Infinity" in got[4]["error"]
    json.dumps(list(qc.results(bad)), allow_nan=False)  # the records are standard JSON
    # the same workers still take work
    again = qc.submit("p", "echo", ["after"], dedup=False).id
    wait_for(lambda: qc.status(again)["state"] == "completed", 30)
    assert all(p.poll() is None for p in procs)


@pytest.mark.parametrize("mode", ["each", "all"])
def test_a_follow_up_that_cannot_be_submitted_is_said_once_and_workers_go_on(qc, mode):
    """A chain whose results cannot become items (here: its queue is gone)
    marks the parent and stops; the sweep does not raise in upkeep."""
    from queueadmin.core.engine.features import chains

    qc.define_queue("gone", QueueConfig())
    rid = qc.submit("default", "echo", ["a"], then={"processor": "echo", "queue": "gone", "mode": mode}).id
    qc.redis.delete(qc.keys.queue("gone").config)
    qc._configs.clear()
    burst(qc, ["default"])
    assert chains.follow(qc, rid) is None
    st = qc.status(rid)
    assert st["then_id"] == "none" and "unknown queue" in st["then_error"]
    assert chains.sweep(qc) == 0
