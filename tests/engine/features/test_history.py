"""The metrics history (core/engine/features/history.py): workers' real runs
write per-minute and per-hour points per queue and per processor; points
from many writers add up; retention is bounded by expiry; p50/p95 are read
back from the buckets. And queue latency (features/latency.py) on a real
queue. Real Redis throughout."""
from __future__ import annotations

import time

import pytest
from hypothesis import given, settings, strategies as st

from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.features import history, latency
from queueadmin.core.engine.features.stats import RUN_BUCKETS
from queueadmin.core.engine.store import Store
from tests.engine_helpers import burst

pytestmark = pytest.mark.timeout(120)
BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)
ECHO, FAIL = "echo", "fail"  # a processor series is named as the request names it


def now_minute() -> int:
    return int(time.time() // 60)


def read_now(qc, series, minutes=3):
    end = now_minute()
    return history.read(qc.redis, qc.keys, series, end - minutes + 1, end, 1)


def test_a_workers_real_runs_write_points_per_queue_and_per_processor(qc):
    qc.define_queue("q2", QueueConfig(backoff_seconds=0.01, max_attempts=2))
    qc.submit("default", "echo", list(range(7)))
    qc.submit("q2", "fail", ["x", "y"])
    burst(qc, ["default", "q2"])
    default = sum_points(read_now(qc, [history.queue_series("default")]))
    q2 = sum_points(read_now(qc, [history.queue_series("q2")]))
    assert (default.done, default.failed) == (7, 0)
    assert (q2.done, q2.failed) == (0, 4)  # two items, two attempts each
    assert sum(default.run) == 7 and sum(default.wait) == 7  # run time and wait of every first attempt
    assert sum(q2.run) == 4 and sum(q2.wait) == 2  # retries have a run time but no wait from enqueue
    everything = sum_points(read_now(qc, [history.ALL]))  # the overview's series: every queue together
    assert (everything.done, everything.failed) == (7, 4)
    echo = sum_points(read_now(qc, [history.processor_series(ECHO)]))
    assert echo.done == 7
    assert sum_points(read_now(qc, [history.processor_series(FAIL)])).failed == 4
    # the hour point has the same figures, as written (downsampled on write)
    hour = now_minute() // 60 * 60
    hourly = sum_points(history.read(qc.redis, qc.keys, [history.queue_series("default")], hour, hour, 60))
    assert (hourly.done, hourly.failed) == (7, 0)


def test_no_history_is_written_when_it_is_switched_off_for_the_bench(qc, monkeypatch):
    monkeypatch.setattr(history, "ENABLED", False)
    qc.submit("default", "echo", ["a"])
    burst(qc)
    assert sum_points(read_now(qc, [history.queue_series("default")])).done == 0


def sum_points(points):
    total = history.Point()
    for p in points:
        total.add(p)
    return total


def point(done=0, failed=0, runs=(), waits=()):
    p = history.Point()
    for _ in range(done):
        p.observe(False, 0.0, None)
    for _ in range(failed):
        p.observe(True, 0.0, None)
    p.run = [0] * len(p.run)
    for t in runs:
        p.observe(None, t, None)
    for w in waits:
        p.wait[history.bisect.bisect_left(history.WAIT_BUCKETS, w)] += 1
    return p


def test_points_written_at_injected_times_land_in_their_minute_and_hour_and_add_up(r):
    store = Store(r, prefix="hx")
    base = 29_000_000 - 29_000_000 % 1440  # a day's first minute
    for writer in range(3):  # three workers writing the same minute
        history.write(store, "q:a", base + 61, point(done=2, failed=1))
    history.write(store, "q:a", base + 62, point(done=5))
    minutes = history.read(r, store.keys, ["q:a"], base + 60, base + 63, 1)
    assert [(p.done, p.failed) for p in minutes] == [(0, 0), (6, 3), (5, 0), (0, 0)]
    history.write(store, "q:a", base + 61, history.Point(max_wait_ms=900))
    history.write(store, "q:a", base + 61, history.Point(max_wait_ms=400))
    assert history.read(r, store.keys, ["q:a"], base + 61, base + 61, 1)[0].max_wait_ms == 900  # the largest
    hours = history.read(r, store.keys, ["q:a"], base, base + 1439, 60)
    assert len(hours) == 24 and (hours[1].done, hours[1].failed) == (11, 3)
    five = history.read(r, store.keys, ["q:a"], base + 60, base + 69, 5)
    assert [p.done for p in five] == [11, 0]


def test_retention_is_bounded_by_expiry_per_minute_hash_and_per_day_hash(r):
    store = Store(r, prefix="hx")
    history.write(store, "q:a", 29_000_000, point(done=1))
    minutes_key = store.keys.history_minutes("q:a", 29_000_000 // 60)
    hours_key = store.keys.history_hours("q:a", 29_000_000 // 1440)
    assert 14 * 86400 < r.ttl(minutes_key) <= history.KEEP_MINUTES
    assert 90 * 86400 <= r.ttl(hours_key) <= history.KEEP_HOURS
    # the number of keys a series can have is fixed: one per hour kept, one per day kept
    written = range(29_000_000, 29_000_000 + 20 * 1440, 60)  # 20 days of writes, one an hour
    for m in written:
        history.write(store, "q:b", m, point(done=1))
    names = {store.keys.history_minutes("q:b", m // 60) for m in written}
    names |= {store.keys.history_hours("q:b", m // 1440) for m in written}
    assert len(names) == 20 * 24 + 21  # one hash per hour, one per day (the writes span 21 days)
    assert all(0 < r.ttl(k) <= history.KEEP_HOURS for k in names)  # each goes by itself: nothing to compact


def test_percentiles_are_read_back_from_the_buckets():
    p = point(runs=[0.02] * 50 + [0.2] * 45 + [3.0] * 5)
    assert RUN_BUCKETS[3] < p.run_p(0.5) <= RUN_BUCKETS[4]  # in the (0.01, 0.025] bucket
    assert 0.1 < p.run_p(0.95) <= 0.25
    assert p.run_p(0.99) > 2.5
    assert history.Point().run_p(0.5) is None


NAMES = ["D", "F", "S", "X", "Q"] + [k + chr(65 + i) for k in "RW" for i in range(22)]  # Q, RV/WV: unknown


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(NAMES), st.integers(0, 10**12)), max_size=30))
def test_any_point_text_parses_and_encodes_back_to_the_same_counters(pairs):
    text = "".join(name + history.b36(n) for name, n in pairs)
    p = history.Point.parse(text)
    again = history.Point.parse(p.encode())
    assert again == p


def test_a_busy_minute_fits_a_compact_hash_entry():
    p = history.Point(done=4321, failed=17, run_ms=1_234_567, max_wait_ms=45_678)
    for i in (5, 6, 7, 8):
        p.run[i] += 900
    for i in (3, 4, 5, 6):
        p.wait[i] += 900
    assert len(p.encode()) <= 64  # Redis keeps an hour's points in one listpack (hash-max-listpack-value)
    assert history.Point.parse(p.encode()) == p


def test_the_script_adds_as_the_reader_expects(r):
    store = Store(r, prefix="hx")
    a, b = history.Point(done=35, run_ms=1000), history.Point(done=1, failed=36**3, run_ms=5)
    a.run[3] = 40
    b.run[3] = 2
    history.write(store, "q:a", 29_000_000, a)
    history.write(store, "q:a", 29_000_000, b)
    (got,) = history.read(r, store.keys, ["q:a"], 29_000_000, 29_000_000, 1)
    assert (got.done, got.failed, got.run_ms, got.run[3]) == (36, 36**3, 1005, 42)


def test_queue_latency_is_the_age_of_the_oldest_waiting_item(qc):
    assert qc.queue_stats("default")["latency"] == 0.0
    qc.submit("default", "echo", ["a", "b"])
    time.sleep(0.3)
    qc.submit("default", "echo", ["c"])
    qc.submit("default", "echo", ["later"], delay=60)  # not due: not waiting
    stats = qc.queue_stats("default")
    assert 0.3 <= stats["latency"] < 5
    assert stats["oldest_waiting_at"] <= time.time() - 0.3
    burst(qc)
    assert qc.queue_stats("default")["latency"] == 0.0


def test_latency_arithmetic():
    assert latency.waiting_since(100.0, None) == 100.0
    assert latency.waiting_since(100.0, 150.0) == 150.0
    assert latency.oldest([None, 120.0, 110.0]) == 110.0
    assert latency.age(None) == 0.0 and latency.age(100.0, now=90.0) == 0.0
    assert latency.age(100.0, now=130.5) == 30.5
