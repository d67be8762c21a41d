"""Bulk jobs by filter (core/engine/client/bulk.py, deadscan.py): dead letters
found by error text, processor and time in bounded chunks with a cursor;
jobs that act batch by batch with progress in Redis, resumed when their
runner is gone; 100,000 matching dead letters in bounded memory and time.
Dead letters are made directly through the engine (submitted items moved to
the dead-letter set with a failed record), not by workers."""
from __future__ import annotations

import json
import time
import tracemalloc

import pytest

from queueadmin.core.engine.client.bulk import BATCH, DONE, RUNNING, BulkJobs, BulkRun
from queueadmin.core.engine.client.deadscan import DeadFilter, DeadScan, parse_cursor
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.store.keys import GROUP

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)
pytestmark = pytest.mark.timeout(300)


def make_dead(qc, n: int, error=lambda i: f"ValueError: bad {i}", processor="echo", finished_at=None) -> str:
    """A request of `n` items, every one a dead letter (delivered, acknowledged,
    in the dead set scored by index, with a failed record)."""
    sub = qc.submit("default", processor, list(range(n)), dedup=False)
    rk = qc.keys.request(sub.id)
    start = "-"
    while True:
        entries = qc.redis.xrange(rk.items, start, "+", count=10_000)
        if start != "-":
            entries = entries[1:]
        if not entries:
            break
        pipe = qc.redis.pipeline(transaction=False)
        for eid, fields in entries:
            i = int(fields["i"])
            at = finished_at(i) if finished_at else time.time()
            pipe.zadd(rk.dead, {eid: i})
            pipe.hset(rk.results, i, json.dumps({"status": "failed", "error": error(i), "traceback": "tb",
                                                 "attempts": 3, "worker": "w", "finished_at": at}))
        pipe.execute()
        start = entries[-1][0]
    qc.redis.xgroup_setid(rk.items, GROUP, "$")  # delivered: no worker would take them again
    qc.redis.hset(rk.meta, "failed", n)
    return sub.id


def scan_of(qc) -> DeadScan:
    return DeadScan(qc.store, qc.reads)


def retry_act(qc):
    def act(pairs):
        by = {}
        for p in pairs:
            rid, eid = p.split(":", 1)
            by.setdefault(rid, []).append(eid)
        done = sum(qc.retry_dead(rid, eids) for rid, eids in by.items())
        return done, len(pairs) - done
    return act


def test_filter_matches_text_case_insensitively_and_time_range():
    f = DeadFilter.checked(text="timeout", since=100, until=200)
    assert f.wants({"error": "ReadTimeout: slow", "finished_at": 150})
    assert not f.wants({"error": "ReadTimeout: slow", "finished_at": 250})
    assert not f.wants({"error": "ValueError", "finished_at": 150})
    assert not f.wants({"error": "Timeout"})  # no time: in no range
    assert DeadFilter.from_json(f.to_json()) == f


@pytest.mark.parametrize("bad", [dict(text="x" * 201), dict(text="a\x00b"), dict(queue="a b"),
                                 dict(processor="../x"), dict(since=float("nan")), dict(since=-1),
                                 dict(since=10, until=5), dict(until="tomorrow"), dict(since=True)])
def test_bad_filters_are_refused_with_a_reason(bad):
    with pytest.raises(QueueError):
        DeadFilter.checked(**bad)


@pytest.mark.parametrize("bad", ["", "x", "1:", "a:b", "1:2:3", "-2:1", "1:-2", "9" * 8 + ":1"])
def test_cursors_are_only_the_ones_the_scan_makes(bad):
    if bad == "":
        assert parse_cursor(bad) == (0, -1)
        return
    with pytest.raises(QueueError):
        parse_cursor(bad)


def test_scan_pages_by_cursor_and_counts_within_its_budget(qc):
    a = make_dead(qc, 30, error=lambda i: "Timeout" if i % 3 == 0 else "KeyError")
    b = make_dead(qc, 30, error=lambda i: "read timeout" if i < 5 else "boom")
    scan = scan_of(qc)
    rids = [rid for rid, _ in scan.narrow([a, b], DeadFilter())]
    assert rids == sorted([a, b], reverse=True)
    flt = DeadFilter(text="TIMEOUT")
    first = scan.scan(rids, flt, keep=8)
    assert first.matched == 15 and first.stopped_at is None  # exact: the walk reached the end
    assert len(first.letters) == 8
    rest = scan.scan(rids, flt, first.next, keep=8)
    assert len(rest.letters) == 7 and rest.next is None
    seen = {(x.request, x.index) for x in first.letters + rest.letters}
    assert len(seen) == 15 and all("timeout" in x.record["error"].lower() for x in first.letters + rest.letters)
    bounded = scan.scan(rids, flt, budget=40, keep=50)
    assert bounded.looked == 40 and bounded.stopped_at is not None  # "N+ match"
    assert bounded.next == bounded.stopped_at


def test_scan_narrows_by_processor_and_time(qc):
    old = make_dead(qc, 10, processor="echo", finished_at=lambda i: 1000.0 + i)
    new = make_dead(qc, 10, processor="uppercase", finished_at=lambda i: 5000.0 + i)
    scan = scan_of(qc)
    assert [r for r, _ in scan.narrow([old, new], DeadFilter(processor="uppercase"))] == [new]
    found = scan.scan([old, new], DeadFilter(since=1003, until=1005.5), keep=50)
    assert sorted(x.index for x in found.letters) == [3, 4, 5]


def test_a_bulk_retry_acts_in_batches_and_reports_progress(qc):
    rid = make_dead(qc, 1200, error=lambda i: "Timeout" if i % 2 else "other")
    jobs, scan = BulkJobs(qc.redis, qc.keys), scan_of(qc)
    flt = DeadFilter(text="timeout")
    jid = jobs.create("dead", "retry", [rid], flt=flt, expected=600)
    run = BulkRun(jobs, scan, jid, retry_act(qc), batch=500)
    assert run.step() is True
    job = jobs.get(jid)
    assert job["state"] == RUNNING and job["looked"] == 500 and job["done"] == 250
    final = run.run()
    assert final["state"] == DONE and final["done"] == 600 and final["skipped"] == 0
    assert qc.redis.zcard(qc.keys.request(rid).dead) == 600  # the others are still dead
    assert not scan.scan([rid], flt).letters


def test_a_job_whose_runner_is_gone_is_resumed_from_its_cursor(qc):
    rid = make_dead(qc, 1000)
    jobs, scan = BulkJobs(qc.redis, qc.keys), scan_of(qc)
    jid = jobs.create("dead", "discard", [rid], flt=DeadFilter())
    discard = lambda pairs: (qc.discard_dead(rid, [p.split(":", 1)[1] for p in pairs]), 0)  # noqa: E731
    first = BulkRun(jobs, scan, jid, discard, batch=300)
    assert jobs.claim(jid, first.runner) and first.step()  # one batch, then the process "dies"
    assert not jobs.stale(jid)
    qc.redis.delete(qc.keys.bulk_runner(jid))  # its lease lapsed
    assert jobs.stale(jid)
    final = BulkRun(jobs, scan, jid, discard, batch=300).run()
    assert final["state"] == DONE and final["done"] == 1000
    assert qc.redis.zcard(qc.keys.request(rid).dead) == 0


def test_target_list_jobs_and_stop(qc):
    jobs, scan = BulkJobs(qc.redis, qc.keys), scan_of(qc)
    seen = []
    jid = jobs.create("requests", "cancel", (f"r{i}" for i in range(1234)))
    assert jobs.get(jid)["targets"] == 1234
    final = BulkRun(jobs, scan, jid, lambda batch: (seen.extend(batch) or len(batch), 0), batch=BATCH).run()
    assert final["done"] == 1234 and seen == [f"r{i}" for i in range(1234)]
    other = jobs.create("requests", "cancel", ["a", "b"])
    assert jobs.stop(other) and not BulkRun(jobs, scan, other, lambda b: (len(b), 0)).step()
    assert jobs.get(other)["done"] == 0 and jobs.get(jobs.create("clear", "cancel", []))["state"] == DONE
    with pytest.raises(ValueError):
        jobs.create("dead", "cancel", [])


@pytest.mark.parametrize("backend", ["single"], indirect=True)  # the cluster runs the same code, slower
def test_100000_matching_dead_letters_in_bounded_memory_and_time(qc):
    rids = [make_dead(qc, 25_000, error=lambda i: f"ReadTimeout after {i} ms") for _ in range(4)]
    jobs, scan = BulkJobs(qc.redis, qc.keys), scan_of(qc)
    flt = DeadFilter(text="timeout")
    t0 = time.monotonic()
    page = scan.scan(rids, flt, keep=50, budget=5000)
    assert time.monotonic() - t0 < 5 and page.matched == 5000 and page.stopped_at  # a page: "5,000+ match"
    jid = jobs.create("dead", "discard", rids, flt=flt)
    by_rid = lambda pairs: sum(qc.discard_dead(r, [p.split(":", 1)[1] for p in pairs if p.startswith(r + ":")])  # noqa: E731
                               for r in {p.split(":", 1)[0] for p in pairs})
    batches = []
    tracemalloc.start()
    final = BulkRun(jobs, scan, jid, lambda pairs: (batches.append(len(pairs)) or by_rid(pairs), 0)).run()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert final["state"] == DONE and final["done"] == 100_000
    assert max(batches) <= BATCH and len(batches) >= 200
    assert peak < 20 * 2**20, f"peak {peak / 2**20:.1f} MiB"  # one batch at a time, not 100,000 letters
    assert sum(qc.redis.zcard(qc.keys.request(r).dead) for r in rids) == 0
