"""The worker runtime (issue 9): many items at once per process on threads
and on an event loop, leases kept while the worker lives, time limits that
free the worker, stop requests, recycling. In-process workers where timing
allows, real `manage.py queue_worker` processes for signals and replacement."""
import os
import signal
import time

import pytest

from queueadmin.core.engine.config import QueueConfig
from tests.engine_helpers import burst, max_overlap, wait_for
from tests.engine.test_crash import assert_exactly_one_result_per_item, completed

pytestmark = pytest.mark.timeout(120)


def finished(qc, rid):
    return lambda: qc.status(rid)["state"] in ("completed", "failed", "cancelled")


# -- many items at once -------------------------------------------------------

def test_sync_items_overlap_on_threads_up_to_the_thread_count(qc):
    sub = qc.submit("default", "sleep", [0.3] * 16, concurrency=16)
    started = time.monotonic()
    burst(qc, threads=8)
    results = list(qc.results(sub.id))
    assert len(results) == 16 and {r["status"] for r in results} == {"done"}
    assert max_overlap(results) == 8
    assert time.monotonic() - started < 16 * 0.3 / 2  # far from one at a time


def test_async_items_overlap_on_the_event_loop(qc):
    sub = qc.submit("default", "async_sleep", [0.5] * 40, concurrency=40)
    burst(qc, threads=1, async_tasks=40)
    results = list(qc.results(sub.id))
    assert len(results) == 40 and {r["status"] for r in results} == {"done"}
    assert max_overlap(results) == 40  # one thread, forty items at once


def test_the_async_limit_caps_items_in_flight(qc):
    sub = qc.submit("default", "async_sleep", [0.2] * 30, concurrency=30)
    burst(qc, async_tasks=10)
    assert max_overlap(list(qc.results(sub.id))) == 10


# -- time limits --------------------------------------------------------------

def test_an_async_item_over_its_limit_is_cancelled_and_retried_then_dead(qc):
    qc.define_queue("tl", QueueConfig(time_limit_seconds=0.5, max_attempts=2, backoff_seconds=0))
    slow = qc.submit("tl", "async_sleep", [60])
    quick = qc.submit("tl", "echo", ["meanwhile"])
    started = time.monotonic()
    burst(qc, ["tl"], threads=2)
    assert time.monotonic() - started < 10
    (rec,) = qc.results(slow.id)
    assert rec["status"] == "failed" and rec["attempts"] == 2
    assert rec["error"].startswith("TimeLimitExceeded") and "0.5s" in rec["error"]
    assert qc.status(slow.id)["dead"] == 1
    assert [r["status"] for r in qc.results(quick.id)] == ["done"]


def test_a_request_time_limit_overrides_the_queue(qc):
    qc.define_queue("tl", QueueConfig(time_limit_seconds=0, max_attempts=1))
    sub = qc.submit("tl", "sleep", [60], time_limit=0.3)
    started = time.monotonic()
    burst(qc, ["tl"], threads=2)
    assert time.monotonic() - started < 10  # the sliced sleep takes the interrupt at once
    (rec,) = qc.results(sub.id)
    assert rec["status"] == "failed" and rec["error"].startswith("TimeLimitExceeded")


def test_a_hung_thread_frees_its_worker_by_replacing_the_process(qc, workers):
    """Blocked in C past its limit: the item is failed after the grace, the
    process replaced; after max attempts it is a dead letter, while another
    request completes meanwhile."""
    qc.define_queue("tl", QueueConfig(lease_seconds=3, time_limit_seconds=1, max_attempts=2, backoff_seconds=0))
    hung = qc.submit("tl", "block_in_c", [3600])
    started = time.monotonic()
    workers.start("tl", 2, False, "", "--threads", "2", "--time-limit-grace", "1")
    other = qc.submit("tl", "sleep", [0.1] * 20, concurrency=2)
    wait_for(finished(qc, hung.id), 60, message="the hung item to be dead-lettered")
    wait_for(completed(qc, other.id), 60, message="the other request")
    assert time.monotonic() - started < 45
    (rec,) = qc.results(hung.id)
    assert rec["status"] == "failed" and rec["attempts"] == 2, rec
    assert rec["error"].startswith("TimeLimitExceeded")
    assert qc.status(hung.id)["dead"] == 1
    assert_exactly_one_result_per_item(qc, other.id, 20)
    slots = {w.get("name"): int(w.get("recycled", 0)) for w in _workers(qc)}
    assert sum(slots.values()) >= 1, slots  # a process was replaced and counted


def test_a_fast_processor_that_hangs_in_the_dispatcher_gets_the_process_replaced(qc, workers):
    """Fast items run on the dispatcher's own thread; one that then blocks in
    C is failed after limit + grace and the process re-executes itself (same
    pid), then serves the next request."""
    qc.define_queue("tl", QueueConfig(time_limit_seconds=1, max_attempts=1))
    first = qc.submit("tl", "fast_or_block", ["x"] * 300 + ["block"], concurrency=1)
    proc = workers.start("tl", 1, False, "", "--time-limit-grace", "1")
    wait_for(finished(qc, first.id), 60, message="the blocked item to fail")
    results = list(qc.results(first.id))
    assert [r["status"] for r in results].count("done") == 300
    assert results[-1]["status"] == "failed" and results[-1]["error"].startswith("TimeLimitExceeded")
    after = qc.submit("tl", "echo", ["served by the fresh process"])
    wait_for(completed(qc, after.id), 60, message="the re-executed worker to serve")
    assert proc.poll() is None  # the same process (pid), re-executed
    assert int(_workers(qc)[0]["recycled"]) == 1


def _workers(qc):
    from queueadmin.core.engine.runtime.registry import Registry

    return [w for w in Registry(qc.redis, qc.keys).workers() if w.get("live")]


# -- stopping ---------------------------------------------------------------

def test_an_operator_stops_one_running_item(qc):
    from tests.engine_helpers import Threads

    qc.define_queue("one", QueueConfig(max_attempts=1))
    sub = qc.submit("one", "sleep", [60, 0.1], concurrency=2)
    started = time.monotonic()
    with Threads(qc, 1, ["one"], threads=2):
        entry = wait_for(lambda: _running_entry(qc, sub.id, index=0), 20, message="item 0 running")
        assert qc.stop_item(sub.id, entry) is True
    assert time.monotonic() - started < 20
    by_index = {r["index"]: r for r in qc.results(sub.id)}
    assert by_index[0]["status"] == "failed" and by_index[0]["error"] == "Stopped: stopped by an operator"
    assert by_index[1]["status"] == "done"
    assert qc.stop_item(sub.id, entry) is False  # not in flight any more


def _running_entry(qc, rid, index):
    for item in qc.items(rid, 0, 10):
        if item["index"] == index and item["status"] == "running":
            return item["entry"]
    return None


# -- recycling --------------------------------------------------------------

def test_recycling_by_item_count_loses_nothing_and_counts_nothing_twice(qc, workers):
    sub = qc.submit("default", "record_pid", list(range(30)), concurrency=2)
    workers.start("default", 1, False, "", "--max-items-per-process", "10", "--threads", "2")
    wait_for(completed(qc, sub.id), 60)
    assert_exactly_one_result_per_item(qc, sub.id, 30)
    assert qc.status(sub.id)["done"] == 30
    assert len({r["worker"] for r in qc.results(sub.id)}) >= 3  # re-executed twice at least


def test_recycling_by_memory_in_a_pool(qc, workers):
    sub = qc.submit("default", "record_pid", list(range(40)), concurrency=4)
    workers.start("default", 2, False, "", "--max-memory-per-process", "1", "--threads", "2")
    wait_for(completed(qc, sub.id), 60)
    assert_exactly_one_result_per_item(qc, sub.id, 40)
    pids = {r["result"] for r in qc.results(sub.id)}
    assert len(pids) > 2  # fresh processes took over


# -- leases and frozen workers ----------------------------------------------

def test_a_worker_frozen_past_its_lease_then_resumed_counts_each_item_once(qc, workers):
    qc.define_queue("fz", QueueConfig(lease_seconds=1, max_attempts=5, backoff_seconds=0))
    sub = qc.submit("fz", "sleep", [0.3] * 40, concurrency=4)
    frozen = workers.start("fz", 1, False, "", "--threads", "4")
    wait_for(lambda: qc.status(sub.id)["done"] >= 4, 30)
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        workers.start("fz", 1, False, "", "--threads", "4")
        time.sleep(3)  # past the lease and the dead-worker detection
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    wait_for(completed(qc, sub.id), 60)
    assert_exactly_one_result_per_item(qc, sub.id, 40)
    status = qc.status(sub.id)
    assert status["done"] == 40 and status["failed"] == 0


# -- item logs and progress ---------------------------------------------------

def test_an_items_log_and_logging_calls_are_kept_with_its_result(qc):
    from tests.engine_helpers import Threads

    sub = qc.submit("default", "chatty", [1.5, 1.5], concurrency=2)
    with Threads(qc, 1, threads=2, heartbeat=0.2) as pool:
        running = wait_for(lambda: _current_with_progress(qc), 20, message="progress in the heartbeat")
        assert running[0]["progress"] == 0.5 and running[0]["note"] == "halfway"
        pool.join()
    for rec in qc.results(sub.id):
        assert rec["status"] == "done"
        lines = rec["log"].splitlines()
        assert lines[0] == "starting 1.5"
        assert lines[1].endswith("INFO tests.chatty: a logging call inside the handler")
        assert "below INFO" not in rec["log"] and len(lines) == 2  # each item has only its own lines


def test_an_items_log_is_cut_at_the_cap_with_a_note(qc):
    from queueadmin.core.engine.runtime.itemlog import LOG_CAP

    sub = qc.submit("default", "flood_log", [2000])
    burst(qc)
    (rec,) = qc.results(sub.id)
    assert len(rec["log"]) <= LOG_CAP + 100
    assert rec["log"].endswith(f"(log cut at {LOG_CAP} characters)")


def _current_with_progress(qc):
    import json

    for w in _workers(qc):
        current = json.loads(w.get("current") or "[]")
        if current and current[0].get("progress") is not None:
            return current
    return None
