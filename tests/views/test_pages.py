"""Pages that stay right and fast at scale (issue 10) and show the worker
runtime (issue 9): dead letters and in-flight items paged inside Redis, in
the right order; the workers page with thread/task slots, running items
against their time limits and recycled processes; the in-flight "stop"
action; the streamed results download. Real redis-server, Django test client."""
from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from queueadmin.core import queries, services
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.store.keys import GROUP
from tests.engine_helpers import burst as _burst

pytestmark = pytest.mark.django_db


@pytest.fixture
def eng(engine):
    """tests/views/conftest.py's, with a time limit on the `fast` queue."""
    engine.define_queue("fast", QueueConfig(lease_seconds=1.0, backoff_seconds=0.01, max_attempts=1,
                                            time_limit_seconds=30))
    return engine


@pytest.fixture
def viewer(eng):
    c = Client()
    c.force_login(User.objects.create_user("viewer", password="pw", is_staff=True))
    return c


def burst(eng, queues=("default",)):
    """An in-process burst worker that records history, as `queue_worker` does."""
    return _burst(eng, queues, on_finish=services.record)


def submit(items, queue="default", processor="echo", **kw) -> str:
    return services.submit(queue, processor, items, **kw).id


def score_by_index(eng, rid):
    """Dead letters scored by item index, as the engine records them."""
    rk = eng.keys.request(rid)
    for eid in eng.redis.zrange(rk.dead, 0, -1):
        eng.redis.zadd(rk.dead, {eid: int(eng.redis.xrange(rk.items, eid, eid)[0][1]["i"])})


# -- dead letters ---------------------------------------------------------------------------------


def all_pages(fetch, size):
    first = fetch(1, size)
    rows = list(first["rows"])
    for n in range(2, first["pg"].pages + 1):
        page = fetch(n, size)
        assert len(page["rows"]) == (size if n < first["pg"].pages else first["pg"].total - size * (n - 1))
        rows += page["rows"]
    return first, rows


def test_dead_letters_page_by_request_then_item_index(staff, eng):
    sizes = {}
    for n in (12, 3, 25):
        rid = submit([f"item {i}" for i in range(n)], queue="fast", processor="fail")
        sizes[rid] = n
        time.sleep(0.002)  # distinct creation times: the newest request comes first
    burst(eng, ["fast"])
    for rid in sizes:
        score_by_index(eng, rid)
    expected = [(rid, i) for rid in sorted(sizes, reverse=True) for i in range(sizes[rid])]
    first, rows = all_pages(lambda n, size: queries.dead_page(None, None, n, size), 7)
    assert first["count"] == 40 and first["pg"].pages == 6
    assert [(r["request"], r["index"]) for r in rows] == expected
    assert all(r["payload"] == f"item {r['index']}" and "always fails" in r["error"] and r["dead_at"] for r in rows)
    one = sorted(sizes)[0]  # the 12-item request alone: #2 before #10
    _, rows = all_pages(lambda n, size: queries.dead_page("fast", one, n, size), 5)
    assert [r["index"] for r in rows] == list(range(12))
    html = staff.get(reverse("queueadmin:dead"), {"request": one}).content.decode()
    assert html.index('">#2</a>') < html.index('">#10</a>')  # each #n links its item's page
    page = staff.get(reverse("queueadmin:dead"), {"page": "2"})  # one page of 50 holds all 40: page 2 is page 1
    assert page.context["count"] == 40 and page.context["pg"].number == 1 and len(page.context["rows"]) == 40


def test_the_engine_records_dead_letters_in_item_order(eng):
    rid = submit([str(i) for i in range(12)], queue="fast", processor="fail")
    burst(eng, ["fast"])
    eng.retry_dead(rid, [e for e in eng.redis.zrange(eng.keys.request(rid).dead, 0, -1)
                         if eng.redis.xrange(eng.keys.request(rid).items, e, e)[0][1]["i"] == "0"])
    burst(eng, ["fast"])  # item #0 dies again, last
    _, rows = all_pages(lambda n, size: queries.dead_page("fast", rid, n, size), 5)
    assert [r["index"] for r in rows] == list(range(12))


def test_dead_letters_recorded_by_time_before_the_index_scoring_still_list(staff, eng):
    """Dead letters written before they were scored by item index carry the
    time they died (ms): they follow the others of their request, oldest first."""
    rid = submit([str(i) for i in range(6)], queue="fast", processor="fail")
    burst(eng, ["fast"])
    score_by_index(eng, rid)
    rk = eng.keys.request(rid)
    by_index = {int(eng.redis.xrange(rk.items, e, e)[0][1]["i"]): e for e in eng.redis.zrange(rk.dead, 0, -1)}
    eng.redis.zadd(rk.dead, {by_index[1]: 1_700_000_002_000, by_index[4]: 1_700_000_001_000})  # legacy scores
    _, rows = all_pages(lambda n, size: queries.dead_page("fast", rid, n, size), 4)
    assert [r["index"] for r in rows] == [0, 2, 3, 5, 4, 1]
    assert rows[-1]["dead_at"] == 1_700_000_002 and rows[0]["dead_at"] > 1_700_000_002


def test_dead_letter_actions_on_all_matching_read_ids_only(staff, eng):
    rid = submit(["a", "b", "c"], queue="fast", processor="fail")
    burst(eng, ["fast"])
    assert sorted(queries.dead_pairs("fast")) == sorted((rid, e) for e in eng.redis.zrange(
        eng.keys.request(rid).dead, 0, -1))
    staff.post(reverse("queueadmin:dead_action"), {"action": "retry", "scope": "all", "filter": "queue=fast", "confirm": "1"})
    assert eng.status(rid)["dead"] == 0 and queries.dead_page("fast")["count"] == 0


# -- in flight --------------------------------------------------------------------------------------


def register(eng, wid, *, beat_ms=None, current=(), **fields):
    beat = int(beat_ms if beat_ms is not None else time.time() * 1000)
    eng.redis.zadd(eng.keys.workers, {wid: beat})
    eng.redis.hset(eng.keys.worker(wid), mapping={"host": "elsewhere", "pid": 1, "heartbeat": beat, "started": beat,
                                                  "queues": "default", "current": json.dumps(list(current)),
                                                  "processed": 0, "failed": 0, **fields})


def hold(eng, rid, wid, n, lease_s):
    """Items of `rid` taken by worker `wid` (delivered, leased `lease_s` from now)."""
    rk = eng.keys.request(rid)
    got = eng.redis.xreadgroup(GROUP, wid, {rk.items: ">"}, count=n)
    eids = [e for e, _ in got[0][1]]
    now = time.time() * 1000
    eng.redis.zadd(rk.leases, {e: now + lease_s * 1000 + k for k, e in enumerate(eids)})
    eng.redis.hset(rk.meta, "state", "running")
    return eids


@pytest.fixture
def flight(eng):
    """Request a (older): 4 items held by a live worker, the first leased in
    the past (stuck); request b (newer): 2 held by the live worker, 1 by a
    dead one (lease still running)."""
    a = submit([f"a{i}" for i in range(6)])
    time.sleep(0.002)
    b = submit([f"b{i}" for i in range(6)], time_limit=7)
    a_stuck = hold(eng, a, "live:1:aa", 1, -5)
    a_rest = hold(eng, a, "live:1:aa", 3, 30)
    b_rest = hold(eng, b, "live:1:aa", 2, 30)
    b_dead = hold(eng, b, "gone:2:bb", 1, 30)
    now = time.time()
    register(eng, "live:1:aa", threads="8", threads_busy="2", tasks="100", tasks_busy="0", current=[
        {"request": a, "entry": a_rest[0], "index": 1, "started": now - 12, "limit": 10.0, "kind": "thread"},
        {"request": b, "entry": b_rest[0], "index": 0, "started": now - 1, "limit": 7.0, "kind": "task"}])
    register(eng, "gone:2:bb", beat_ms=time.time() * 1000 - 3_600_000)
    return {"a": a, "b": b, "order": [(a, a_stuck[0]), (b, b_dead[0])] + [(b, e) for e in b_rest]
            + [(a, e) for e in a_rest], "stuck": [(a, a_stuck[0]), (b, b_dead[0])], "running": a_rest[0]}


def test_in_flight_pages_stuck_first_then_by_request_and_deadline(staff, eng, flight):
    first, rows = all_pages(lambda n, size: queries.inflight_page(None, False, n, size), 2)
    assert first["count"] == 7 and first["stuck_count"] == 2
    assert [(r["request"], r["entry"]) for r in rows] == flight["order"]
    assert [r["stuck"] for r in rows] == [True, True, False, False, False, False, False]
    assert rows[0]["lease_expired"] and rows[1]["dead_worker"]
    _, stuck = all_pages(lambda n, size: queries.inflight_page(None, True, n, size), 1)
    assert [(r["request"], r["entry"]) for r in stuck] == flight["stuck"]
    assert sorted(queries.inflight_pairs()) == sorted(flight["stuck"])
    page = staff.get(reverse("queueadmin:inflight"), {"stuck": "1"})
    assert [(r["request"], r["entry"]) for r in page.context["rows"]] == flight["stuck"]


def test_in_flight_shows_elapsed_time_against_the_limit_and_flags_items_over_it(staff, viewer, eng, flight):
    rows = {r["entry"]: r for r in staff.get(reverse("queueadmin:inflight")).context["rows"]}
    over = rows[flight["running"]]
    assert over["running"] and over["kind"] == "thread" and over["limit"] == 10.0 and over["over_limit"]
    assert 11 < over["elapsed"] < 20
    b_running = next(r for r in rows.values() if r["request"] == flight["b"] and r["running"])
    assert b_running["limit"] == 7.0 and not b_running["over_limit"]
    b_other = [r for r in rows.values() if r["request"] == flight["b"] and not r["running"]]
    assert all(r["limit"] == 7.0 for r in b_other)  # the request's own limit
    a_other = [r for r in rows.values() if r["request"] == flight["a"] and not r["running"]]
    assert all(r["limit"] == 3600.0 for r in a_other)  # the queue's
    html = staff.get(reverse("queueadmin:inflight")).content.decode()
    assert "over limit" in html
    assert html.count('form="stop-form"') == 2  # only items a live worker runs can be stopped
    assert 'form="stop-form"' not in viewer.get(reverse("queueadmin:inflight")).content.decode()
    fragment = staff.get(reverse("queueadmin:inflight"), headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in fragment and 'id="inflight-table"' in fragment


def test_stop_an_item_is_a_confirmed_post_for_staff_who_may_act(staff, viewer, eng, flight, monkeypatch):
    rid, entry = flight["a"], flight["running"]
    calls = []

    def stop_item(r, e):
        calls.append((r, e))
        return len(calls) == 1

    monkeypatch.setattr(services.engine(), "stop_item", stop_item, raising=False)
    url = reverse("queueadmin:inflight_stop")
    assert staff.get(url).status_code == 405
    assert viewer.post(url, {"ids": f"{rid}:{entry}", "confirm": "1"}).status_code == 403
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(User.objects.get(username="boss"))
    assert strict.post(url, {"ids": f"{rid}:{entry}", "confirm": "1"}).status_code == 403
    ask = staff.post(url, {"ids": f"{rid}:{entry}"})
    assert ask.status_code == 200 and "Stop item" in ask.content.decode() and calls == []
    dialog = staff.post(url, {"ids": f"{rid}:{entry}"}, headers={"HX-Request": "true"})
    assert dialog["HX-Retarget"] == "#dialog-slot" and calls == []
    done = staff.post(url, {"ids": f"{rid}:{entry}", "confirm": "1"}, follow=True)
    assert calls == [(rid, entry)] and "its worker stops it" in done.content.decode()
    again = staff.post(url, {"ids": f"{rid}:{entry}", "confirm": "1"}, follow=True)
    assert "not running any more" in again.content.decode()
    junk = staff.post(url, {"ids": "<script>:1-0", "confirm": "1"}, follow=True)
    assert "Nothing to stop" in junk.content.decode() and len(calls) == 2


def test_an_operator_may_stop_items(eng, flight, monkeypatch):
    user = User.objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="change_requestrecord"))
    c = Client()
    c.force_login(user)
    calls = []
    monkeypatch.setattr(services.engine(), "stop_item", lambda r, e: calls.append((r, e)) or True, raising=False)
    c.post(reverse("queueadmin:inflight_stop"), {"ids": f"{flight['a']}:{flight['running']}", "confirm": "1"})
    assert calls == [(flight["a"], flight["running"])]


# -- workers ------------------------------------------------------------------------------------------


def test_workers_page_shows_slots_running_items_against_limits_and_recycling(staff, eng):
    now = time.time()
    register(eng, "new:1:aa", threads="8", threads_busy="2", tasks="100", tasks_busy="1", recycled="3",
             processed="40", current=[
                 {"request": "r-over", "entry": "1-0", "index": 10, "started": now - 12, "limit": 10, "kind": "thread"},
                 {"request": "r-ok", "entry": "2-0", "index": 2, "started": now - 3, "limit": 0, "kind": "task"}])
    register(eng, "old:2:bb", current=[{"request": "r-old", "entry": "3-0", "index": 1, "started": now - 1}])
    eng.redis.zadd(eng.keys.workers, {"junk:3:cc": now * 1000})
    eng.redis.hset(eng.keys.worker("junk:3:cc"), mapping={"heartbeat": int(now * 1000), "current": "not json",
                                                           "threads": "many", "recycled": "x"})
    eng.redis.zadd(eng.keys.workers, {"odd:4:dd": now * 1000})
    eng.redis.hset(eng.keys.worker("odd:4:dd"), mapping={"heartbeat": int(now * 1000), "current": json.dumps(
        [1, {"request": 5}, {"request": "r-x", "started": "soon", "limit": "nan"}])})
    page = staff.get(reverse("queueadmin:workers"))
    assert page.status_code == 200
    rows = {w["id"]: w for w in page.context["rows"]}
    new = rows["new:1:aa"]
    assert new["threads"] == {"total": 8, "busy": 2} and new["tasks"] == {"total": 100, "busy": 1}
    assert new["recycled"] == 3 and new["over_limit"] == 1
    over, ok = new["current"]
    assert over["over"] and over["limit"] == 10 and 11 < over["elapsed"] < 20 and over["kind"] == "thread"
    assert not ok["over"] and ok["limit"] == 0
    old = rows["old:2:bb"]  # a worker from before: fields missing
    assert old["threads"] is None and old["tasks"] is None and old["recycled"] is None
    assert old["current"][0]["limit"] == 0 and not old["current"][0]["over"]
    assert rows["junk:3:cc"]["current"] == [] and rows["junk:3:cc"]["threads"] is None
    assert [c["request"] for c in rows["odd:4:dd"]["current"]] == ["r-x"]
    assert page.context["over_count"] == 1 and page.context["running_count"] == 4
    html = page.content.decode()
    assert "2 / 8" in html and "1 / 100" in html and "over limit" in html and "no limit" in html
    assert reverse("queueadmin:request_detail", args=["r-over"]) in html
    fragment = staff.get(reverse("queueadmin:workers"), headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in fragment and 'id="workers-table"' in fragment


# -- downloads ------------------------------------------------------------------------------------------


def test_results_download_is_streamed_in_item_order(staff, eng):
    rid = submit([f"x{i}" for i in range(2500)], processor="uppercase")
    burst(eng)
    response = staff.get(reverse("queueadmin:request_results", args=[rid]))
    assert response.streaming and response["Content-Type"].startswith("application/x-ndjson")
    chunks = list(response.streaming_content)
    assert len(chunks) > 1  # sent in pieces, not built whole
    lines = b"".join(chunks).decode().splitlines()
    assert [json.loads(line)["result"] for line in lines] == [f"X{i}" for i in range(2500)]
    assert staff.get(reverse("queueadmin:request_results", args=["nosuchrequest"])).status_code == 404
