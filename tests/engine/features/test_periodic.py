"""Periodic requests, engine side (core/engine/periodic.py) on a real Redis:
due-time arithmetic, downtime policies, atomic claims, a lapsed claim fired
again without a second request, and definitions published and repaired."""
from __future__ import annotations

import threading
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from queueadmin.core.engine.features import periodic
from queueadmin.core.engine.client.queue_client import QueueClient
from queueadmin.core.engine.client.dedup import PERIODIC, scoped_key
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features.periodic import Definition
from tests.engine_helpers import burst


def every(seconds=1, name="tick", catch_up="once", **kw) -> Definition:
    return Definition(name=name, queue="default", processor="echo", items=["a", "b"], interval=seconds,
                      catch_up=catch_up, **kw)


def ms(*args, tz="UTC") -> int:
    return int(datetime(*args, tzinfo=ZoneInfo(tz)).timestamp() * 1000)


# -- due times and policies (no Redis) ------------------------------------------


def test_interval_due_times_count_from_the_epoch():
    d = every(60)
    t = ms(2026, 3, 1, 10, 0, 30)
    assert d.next_after(t) == ms(2026, 3, 1, 10, 1)
    assert d.latest_at(t) == ms(2026, 3, 1, 10, 0)
    assert d.latest_at(ms(2026, 3, 1, 10, 0)) == ms(2026, 3, 1, 10, 0)  # at the due time itself
    assert d.next_after(ms(2026, 3, 1, 10, 0)) == ms(2026, 3, 1, 10, 1)  # strictly after


def test_cron_is_read_in_the_time_zone():
    d = Definition(name="n", queue="default", processor="echo", items=["x"], cron="0 9 * * *", tz="Europe/Berlin")
    t = ms(2026, 7, 1, 12, 0)  # 14:00 in Berlin (summer time)
    assert d.next_after(t) == ms(2026, 7, 2, 9, 0, tz="Europe/Berlin") == ms(2026, 7, 2, 7, 0)
    assert d.latest_at(t) == ms(2026, 7, 1, 7, 0)
    six = Definition(name="n", queue="default", processor="echo", items=["x"], cron="* * * * * */5")
    assert six.next_after(ms(2026, 1, 1, 0, 0, 1)) == ms(2026, 1, 1, 0, 0, 5)


@pytest.mark.parametrize("bad, message", [
    (dict(cron="61 * * * *", interval=0), "not a valid cron"),
    (dict(cron="0 0 30 2 *", interval=0), "never comes due"),
    (dict(cron="* * * * *", interval=5), "not both"),
    (dict(cron="", interval=0), "either"),
    (dict(interval=5, tz="Mars/Olympus"), "unknown time zone"),
    (dict(interval=5, items=[]), "at least one item"),
    (dict(interval=5, catch_up="twice"), "catch-up"),
])
def test_bad_definitions_are_refused_with_a_reason(bad, message):
    fields = {"name": "n", "queue": "default", "processor": "echo", "items": ["x"], "tz": "UTC", **bad}
    with pytest.raises(QueueError, match=message):
        Definition(**fields).check()


def test_plan_on_time_late_and_after_downtime():
    d = every(10)
    base = ms(2026, 1, 1, 0, 0)
    assert periodic.plan(d, base, base + 300) == ([base], base + 10_000, None)  # on time
    assert periodic.plan(d, base, base + 9_000) == ([base], base + 10_000, None)  # late, within one period
    late = periodic.plan(d, base, base + 12_000)  # the first missed, the second on time: both fire
    assert late == ([base, base + 10_000], base + 20_000, base)
    # down for a minute: "once" fires one request for all missed times (plus the one on time), "skip" none
    assert periodic.plan(d, base, base + 60_500) == ([base + 50_000, base + 60_000], base + 70_000, base + 50_000)
    skip = every(10, catch_up="skip")
    assert periodic.plan(skip, base, base + 60_500) == ([base + 60_000], base + 70_000, None)
    assert periodic.plan(skip, base, base + 65_000) == ([base + 60_000], base + 70_000, None)
    assert periodic.plan(skip, base, base + 71_000 - 1) == ([base + 70_000], base + 80_000, None)


def test_request_ids_are_derived_from_schedule_and_due_time_and_a_secret(qc, r):
    a = periodic.request_id(qc, "nightly", 1_800_000_000_000)
    assert a == periodic.request_id(qc, "nightly", 1_800_000_000_000)
    assert a == periodic.request_id(QueueClient(r, prefix=qc.keys.prefix), "nightly", 1_800_000_000_000)
    assert a != periodic.request_id(qc, "nightly", 1_800_000_001_000) != periodic.request_id(qc, "hourly",
                                                                                              1_800_000_000_000)
    assert len(a) <= 32 and a.isalnum() and a.startswith(f"{1_800_000_000_000:011x}")
    assert periodic.dedup_key("nightly", 1_800_000_000_000) == "periodic:nightly:1800000000"
    # not computable without the secret: another Redis (another secret) gives another id
    r.delete(qc.keys.periodic.secret)
    assert periodic.request_id(QueueClient(r, prefix=qc.keys.prefix), "nightly", 1_800_000_000_000) != a


# -- Redis -------------------------------------------------------------------------


def _requests(qc):
    """(due ms, request id) of every periodic request made, from the queue's index."""
    out = []
    for rid in qc.redis.zrange(qc.keys.queue("default").index, 0, -1):
        meta = qc.redis.hgetall(qc.keys.request(rid).meta)
        if meta.get("periodic"):
            out.append((int(meta["due_at"]), rid, meta["dedup_key"]))
    return sorted(out)


def test_a_due_time_fires_once_and_the_schedule_moves_on(qc):
    assert periodic.define(qc, every(1)) is True
    nxt = periodic.next_runs(qc, ["tick"])["tick"]
    time.sleep(max(0, nxt / 1000 - time.time()) + 0.05)
    fired = periodic.run(qc)
    assert [(n, t) for n, t, _ in fired] == [("tick", nxt)]
    assert periodic.run(qc) == []  # nothing more is due
    assert periodic.next_runs(qc, ["tick"])["tick"] == nxt + 1000
    (due, rid, key), = _requests(qc)
    assert (due, rid, key) == (nxt, periodic.request_id(qc, "tick", nxt), f"periodic\x1fperiodic:tick:{nxt // 1000}")
    assert qc.status(rid)["dedup_key"] == f"periodic:tick:{nxt // 1000}"  # shown without its scope
    assert qc.status(rid)["total"] == 2
    assert periodic.last_runs(qc, ["tick"])["tick"]["request"] == rid


def test_concurrent_claimers_fire_each_due_time_once(qc):
    periodic.define(qc, every(1))
    stop, errors, claimed = time.monotonic() + 3.2, [], []

    def loop():
        try:
            while time.monotonic() < stop:
                claimed.extend(t for _, t, _ in periodic.run(qc))
                time.sleep(0.01)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=loop) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    dues = [d for d, _, _ in _requests(qc)]
    assert len(dues) >= 3
    assert dues == list(range(dues[0], dues[0] + 1000 * len(dues), 1000))  # consecutive, no duplicates
    assert sorted(claimed) == dues  # each due time was claimed by one thread only (ids aside)


def test_a_lapsed_claim_fires_the_same_due_time_without_a_second_request(qc, monkeypatch):
    monkeypatch.setattr(periodic, "LEASE_MS", 300)
    periodic.define(qc, every(1))
    pk = qc.keys.periodic
    nxt = periodic.next_runs(qc, ["tick"])["tick"]
    time.sleep(max(0, nxt / 1000 - time.time()) + 0.05)
    # a worker claims, submits, and dies before putting the schedule back
    answer = qc.scripts("periodic_claim", [pk.due, pk.claims, pk.defs], [10, 300, "dead-worker"])
    assert answer[1:3] == ["tick", str(nxt)]
    first = periodic.fire(qc, Definition.from_json(answer[3]), nxt)
    burst(qc)  # ... and its request even finished
    assert qc.status(first)["state"] == "completed"
    assert periodic.run(qc) == []  # the claim has not lapsed yet
    time.sleep(0.35)
    fired = periodic.run(qc)
    assert (fired[0][1], fired[0][2]) == (nxt, first)  # the same due time, the same (finished) request
    assert [d for d, _, _ in _requests(qc)].count(nxt) <= 1
    assert qc.redis.exists(qc.keys.request(first).meta)
    assert periodic.next_runs(qc, ["tick"])["tick"] > nxt


def test_created_but_not_registered_is_registered_by_the_next_claimer(qc):
    d = every(1)
    due = periodic.server_ms(qc) - 200
    rid = periodic.request_id(qc, d.name, due)
    rk = qc.keys.request(rid)
    meta = dict(id=rid, queue="default", processor="echo", priority=50, concurrency=1, state="queued",
                dedup_key=scoped_key(PERIODIC, periodic.dedup_key(d.name, due)))
    fields = [len(meta)] + [x for kv in meta.items() for x in kv]
    qc.scripts("create", [rk.meta, rk.items], [0, 0, 1, *fields, "\"x\""])  # then its maker died
    assert periodic.fire(qc, d, due) == rid
    burst(qc)
    assert qc.status(rid)["state"] == "completed"


def test_definitions_keep_their_place_unless_the_timing_changes(qc):
    periodic.define(qc, every(3600))
    first = periodic.next_runs(qc, ["tick"])["tick"]
    qc.redis.zadd(qc.keys.periodic.due, {"tick": first - 5})  # to see whether it is rescheduled
    assert periodic.define(qc, every(3600, priority=90)) is False  # items/priority edited: same place
    assert periodic.next_runs(qc, ["tick"])["tick"] == first - 5
    assert periodic.define(qc, every(60)) is True  # new timing: its next due time
    assert periodic.next_runs(qc, ["tick"])["tick"] % 60_000 == 0
    periodic.remove(qc, "tick")  # paused
    assert periodic.next_runs(qc, ["tick"])["tick"] is None
    assert periodic.run(qc) == []


def test_repair_puts_back_a_schedule_missing_from_the_due_set(qc):
    periodic.define(qc, every(60))
    qc.redis.zrem(qc.keys.periodic.due, "tick")
    assert periodic.repair(qc) == 1
    assert periodic.next_runs(qc, ["tick"])["tick"] % 60_000 == 0
    assert periodic.repair(qc) == 0


def test_an_unknown_queue_is_recorded_and_the_schedule_goes_on(qc):
    d = Definition(name="lost", queue="nowhere", processor="echo", items=["x"], interval=1)
    periodic.define(qc, d)
    qc.redis.zadd(qc.keys.periodic.due, {"lost": periodic.server_ms(qc) - 10})
    assert periodic.run(qc) == []
    assert "unknown queue" in periodic.last_runs(qc, ["lost"])["lost"]["error"]
    assert periodic.next_runs(qc, ["lost"])["lost"] > periodic.server_ms(qc)
