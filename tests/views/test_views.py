"""Dashboard pages and actions against a real redis-server (the `redis_url`
fixture) and the test database: who may see and do what, htmx fragments,
and each page's content."""
from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.models import RequestRecord
from tests.engine_helpers import burst as _burst

pytestmark = pytest.mark.django_db

PAGES = ["overview", "submit", "requests", "inflight", "dead", "scheduled", "workers", "queues", "activity"]


@pytest.fixture
def admin_user():
    return User.objects.create_superuser("boss", "boss@example.com", "pw")


@pytest.fixture
def operator():
    user = User.objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="change_requestrecord"))
    return user


@pytest.fixture
def staff(client, admin_user, eng):
    client.force_login(admin_user)
    return client


def burst(eng, queues=("default",)):
    """An in-process burst worker that records history, as `queue_worker` does."""
    return _burst(eng, queues, on_finish=services.record)


def submit(eng, items, queue="default", processor="echo", **kw):
    sub = services.submit(queue, processor, items, **kw)
    return sub.id


def htmx(client, url, **kw):
    return client.get(url, headers={"HX-Request": "true"}, **kw)


# -- access -------------------------------------------------------------------------


@pytest.mark.parametrize("name", PAGES)
def test_anonymous_users_are_sent_to_login(client, eng, name):
    response = client.get(reverse("queueadmin:" + name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("name", PAGES)
def test_non_staff_get_403(client, eng, name):
    client.force_login(User.objects.create_user("joe", password="pw"))
    assert client.get(reverse("queueadmin:" + name)).status_code == 403


@pytest.mark.parametrize("name", PAGES)
def test_every_page_renders_full_and_as_htmx_fragment(staff, name):
    full = staff.get(reverse("queueadmin:" + name))
    assert full.status_code == 200
    assert b"<html" in full.content and b"htmx.min.js" in full.content
    assert full["Cache-Control"].startswith("max-age=0") or "no-cache" in full["Cache-Control"]
    part = htmx(staff, reverse("queueadmin:" + name))
    assert part.status_code == 200
    assert b"<html" not in part.content


def test_view_only_staff_see_no_action_buttons_and_get_403_on_actions(client, viewer, eng):
    rid = submit(eng, ["a", "b"])
    client.force_login(viewer)
    page = client.get(reverse("queueadmin:request_detail", args=[rid]))
    assert page.status_code == 200
    assert b"Set priority" not in page.content and b"Cancel request" not in page.content
    assert client.get(reverse("queueadmin:submit")).status_code == 403
    for name in ("request_cancel", "request_priority", "request_concurrency", "request_retry"):
        assert client.post(reverse("queueadmin:" + name, args=[rid]), {"priority": 5, "concurrency": 2}).status_code == 403
    for name in ("inflight_requeue", "dead_action", "scheduled_action", "request_bulk"):
        assert client.post(reverse("queueadmin:" + name), {}).status_code == 403
    assert client.post(reverse("queueadmin:queue_pause", args=["default"]), {"paused": "1"}).status_code == 403
    assert eng.status(rid)["state"] == "queued"


def test_staff_with_the_act_permission_may_act(client, operator, eng):
    rid = submit(eng, ["a"])
    client.force_login(operator)
    assert b"Set priority" in client.get(reverse("queueadmin:request_detail", args=[rid])).content
    client.post(reverse("queueadmin:request_priority", args=[rid]), {"priority": "7"})
    assert eng.status(rid)["priority"] == 7


def test_actions_need_post_and_csrf(eng, admin_user):
    from django.test import Client

    rid = submit(eng, ["a"])
    c = Client(enforce_csrf_checks=True)
    c.force_login(admin_user)
    assert c.get(reverse("queueadmin:request_cancel", args=[rid])).status_code == 405
    assert c.post(reverse("queueadmin:request_cancel", args=[rid]), {"confirm": "1"}).status_code == 403
    assert eng.status(rid)["state"] == "queued"


# -- overview ------------------------------------------------------------------------


def test_overview_shows_depth_by_priority_in_flight_and_workers(staff, eng):
    submit(eng, ["x"] * 5, priority=80)
    submit(eng, ["y"] * 3, priority=10)
    submit(eng, ["z"] * 2, delay=3600)
    body = staff.get(reverse("queueadmin:overview")).content.decode()
    assert "p80: 5" in body and "p10: 3" in body
    ctx = staff.get(reverse("queueadmin:overview")).context
    q = next(q for q in ctx["ov"]["queues"] if q["name"] == "default")
    assert q["depth"] == 8 and q["scheduled"] == 2 and q["depth_by_priority"] == [(80, 5), (10, 3)]
    assert 'ws-connect="/ws/live/?topic=overview"' in body


def test_overview_counts_throughput_and_dead_letters(staff, eng):
    submit(eng, ["ok1", "ok2"], processor="uppercase")
    submit(eng, ["bad"], queue="fast", processor="fail")
    burst(eng, ["default", "fast"])
    ov = staff.get(reverse("queueadmin:overview")).context["ov"]
    assert ov["totals"]["dead"] == 1
    assert sum(d for d, _ in ov["throughput"]) == 2 and sum(f for _, f in ov["throughput"]) == 1


# -- submit -----------------------------------------------------------------------------


def test_submit_form_creates_a_request_and_redirects_to_it(staff, eng):
    response = staff.post(reverse("queueadmin:submit"), {"queue": "default", "processor": "uppercase",
                                              "items": "one\ntwo\n\nthree\n", "priority": "70", "concurrency": "3"})
    assert response.status_code == 302
    rid = response["Location"].rstrip("/").split("/")[-1]
    st = eng.status(rid)
    assert st["total"] == 3 and st["priority"] == 70 and st["concurrency"] == 3
    assert RequestRecord.objects.get(id=rid).items_preview == "one\ntwo\nthree"
    page = staff.get(response["Location"])
    assert "Submitted 3 items" in page.content.decode()


def test_submit_from_an_uploaded_file_with_delay_expiry_and_dedup_key(staff, eng):
    from django.core.files.uploadedfile import SimpleUploadedFile

    f = SimpleUploadedFile("items.txt", b"alpha\nbeta\n")
    response = staff.post(reverse("queueadmin:submit"), {"queue": "default", "processor": "echo", "upload": f,
                                              "delay_seconds": "120", "expires_in_seconds": "600",
                                              "dedup_key": "batch-42"})
    rid = response["Location"].rstrip("/").split("/")[-1]
    st = eng.status(rid)
    assert st["state"] == "scheduled" and st["total"] == 2 and st["dedup_key"] == "batch-42"
    assert st["expires_at"] - st["created_at"] == pytest.approx(600, abs=1)


def test_a_duplicate_submission_lands_on_the_existing_request(staff, eng):
    data = {"queue": "default", "processor": "echo", "items": "same\nitems"}
    first = staff.post(reverse("queueadmin:submit"), data)["Location"]
    second = staff.post(reverse("queueadmin:submit"), data, follow=True)
    assert second.redirect_chain[-1][0] == first
    assert "already pending or running" in second.content.decode()


@pytest.mark.parametrize("data, message", [
    ({"items": ""}, "give at least one item"),
    ({"items": "a", "priority": "100"}, "less than or equal to 99"),
    ({"items": "a", "concurrency": "0"}, "greater than or equal to 1"),
    ({"items": "a", "queue": "nope"}, "Select a valid choice"),
    ({"items": "a", "processor": "rm -rf"}, "Select a valid choice"),
    ({"items": "{bad", "json_items": "on"}, "line 1 is not valid JSON"),
    ({"items": "a", "delay_seconds": "5", "start_at": "2030-01-01T10:00"}, "either a delay or a start time"),
    ({"items": "a", "delay_seconds": "abc"}, "Enter a number"),
])
def test_bad_submissions_get_a_message_not_a_500(staff, eng, data, message):
    response = staff.post(reverse("queueadmin:submit"), {"queue": "default", "processor": "echo", **data})
    assert response.status_code == 200
    assert message in response.content.decode()


# -- requests list -----------------------------------------------------------------------------


def test_request_list_filters_searches_items_and_overlays_live_status(staff, eng):
    a = submit(eng, ["needle in a haystack", "b"], processor="uppercase", priority=90)
    b = submit(eng, ["other"], processor="echo", priority=20)
    eng.set_priority(b, 21)  # only Redis knows; the list overlays it
    rows = staff.get(reverse("queueadmin:requests")).context["rows"]
    assert {r["id"] for r in rows} == {a, b}
    assert next(r for r in rows if r["id"] == b)["priority"] == 21
    assert [r["id"] for r in staff.get(reverse("queueadmin:requests"), {"q": "NEEDLE"}).context["rows"]] == [a]
    assert [r["id"] for r in staff.get(reverse("queueadmin:requests"), {"q": b[:12]}).context["rows"]] == [b]
    assert [r["id"] for r in staff.get(reverse("queueadmin:requests"), {"processor": "echo"}).context["rows"]] == [b]
    assert [r["id"] for r in staff.get(reverse("queueadmin:requests"), {"priority_min": "50"}).context["rows"]] == [a]
    assert [r["id"] for r in staff.get(reverse("queueadmin:requests"), {"state": "completed"}).context["rows"]] == []
    assert len(staff.get(reverse("queueadmin:requests"), {"since": "1h"}).context["rows"]) == 2
    bad = staff.get(reverse("queueadmin:requests"), {"priority_min": "abc", "queue": "<b>"})
    assert bad.status_code == 200


def test_request_list_is_paginated(staff, eng):
    for i in range(55):
        submit(eng, [f"item {i}"])
    first = staff.get(reverse("queueadmin:requests"))
    assert len(first.context["rows"]) == 50 and first.context["pg"].pages == 2
    second = htmx(staff, reverse("queueadmin:requests"), data={"page": "2"})
    assert len(second.context["rows"]) == 5
    assert staff.get(reverse("queueadmin:requests"), {"page": "999"}).context["pg"].number == 2


def test_bulk_cancel_confirms_the_count_first(staff, eng):
    ids = [submit(eng, [f"x{i}"]) for i in range(3)]
    ask = staff.post(reverse("queueadmin:request_bulk"), {"scope": "all", "filter": ""}, headers={"HX-Request": "true"})
    assert ask.status_code == 200 and ask["HX-Retarget"] == "#dialog-slot"
    assert ask.context["count"] == 3 and "Cancel 3 requests?" in ask.content.decode()
    assert all(eng.status(i)["state"] == "queued" for i in ids)
    staff.post(reverse("queueadmin:request_bulk"), {"scope": "selected", "ids": ids[:2], "confirm": "1"})
    assert [eng.status(i)["state"] for i in ids] == ["cancelled", "cancelled", "queued"]
    assert RequestRecord.objects.get(id=ids[0]).state == "cancelled"


# -- request detail ---------------------------------------------------------------------------------


def test_request_page_shows_progress_items_results_and_escapes_everything(staff, eng):
    rid = submit(eng, ["<script>alert(1)</script>", "fine"], processor="uppercase")
    burst(eng)
    page = staff.get(reverse("queueadmin:request_detail", args=[rid]))
    body = page.content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "&lt;SCRIPT&gt;ALERT(1)&lt;/SCRIPT&gt;" in body
    st = page.context["st"]
    assert st["state"] == "completed" and st["pct"] == 100.0
    rows = page.context["items"]["rows"]
    assert [r["status"] for r in rows] == ["done", "done"] and rows[0]["attempts"] == 1 and rows[0]["worker"]


def test_request_items_are_paged_by_cursor(staff, eng):
    rid = submit(eng, [f"i{n}" for n in range(120)])
    first = staff.get(reverse("queueadmin:request_detail", args=[rid])).context["items"]
    assert [r["index"] for r in first["rows"]][:2] == [0, 1] and len(first["rows"]) == 50 and first["has_next"]
    second = staff.get(reverse("queueadmin:request_detail", args=[rid]), {"after": first["last"]}).context["items"]
    assert second["rows"][0]["index"] == 50 and second["has_prev"]
    last = staff.get(reverse("queueadmin:request_detail", args=[rid]), {"after": "$"}).context["items"]
    assert last["rows"][-1]["index"] == 119 and not last["has_next"]
    back = staff.get(reverse("queueadmin:request_detail", args=[rid]), {"before": second["first"]}).context["items"]
    assert back["rows"][0]["index"] == 0
    assert staff.get(reverse("queueadmin:request_detail", args=[rid]), {"after": "junk"}).status_code == 200


def test_request_page_for_an_unknown_or_cleaned_up_request(staff, eng):
    assert staff.get(reverse("queueadmin:request_detail", args=["nosuchrequest"])).status_code == 404
    assert staff.get("/requests/bad%20id!/").status_code == 404
    rid = submit(eng, ["a"])
    burst(eng)
    services.record(eng.status(rid))
    eng.redis.delete(*eng.keys.request(rid).all())  # retention passed
    page = staff.get(reverse("queueadmin:request_detail", args=[rid]))
    assert page.status_code == 200 and "no longer in Redis" in page.content.decode()
    assert page.context["st"]["state"] == "completed"
    assert staff.get(reverse("queueadmin:request_results", args=[rid])).status_code == 404


def test_a_corrupt_result_record_does_not_break_the_request_page(staff, eng):
    rid = submit(eng, ["a", "b"])
    eng.redis.hset(eng.keys.request(rid).results, 0, "{not json")
    page = staff.get(reverse("queueadmin:request_detail", args=[rid]))
    assert page.status_code == 200
    assert page.context["items"]["rows"][0]["status"] == "corrupt"


def test_download_results_as_json_lines(staff, eng):
    rid = submit(eng, ["a", "b", "c"], processor="uppercase")
    burst(eng)
    response = staff.get(reverse("queueadmin:request_results", args=[rid]))
    assert response["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in b"".join(response.streaming_content).decode().splitlines()]
    assert [(x["index"], x["status"], x["result"]) for x in lines] == [(0, "done", "A"), (1, "done", "B"),
                                                                       (2, "done", "C")]


def test_cancel_priority_concurrency_and_retry_actions(staff, eng):
    rid = submit(eng, ["a", "b"], priority=10, concurrency=1)
    url = lambda name: reverse("queueadmin:" + name, args=[rid])  # noqa: E731
    assert staff.post(url("request_priority"), {"priority": "95"}).status_code == 302
    assert staff.post(url("request_concurrency"), {"concurrency": "4"}).status_code == 302
    st = eng.status(rid)
    assert (st["priority"], st["concurrency"]) == (95, 4)
    assert RequestRecord.objects.get(id=rid).priority == 95
    bad = staff.post(url("request_priority"), {"priority": "x"}, follow=True)
    assert "Priority must be a whole number" in bad.content.decode()
    bad = staff.post(url("request_concurrency"), {"concurrency": "0"}, follow=True)
    assert "Concurrency limit must be between" in bad.content.decode()
    ask = staff.post(url("request_cancel"))
    assert ask.status_code == 200 and ask.context["count"] == 2
    staff.post(url("request_cancel"), {"confirm": "1"})
    assert eng.status(rid)["state"] == "cancelled"
    again = staff.post(url("request_priority"), {"priority": "5"}, follow=True)
    assert "Cannot change the priority" in again.content.decode()

    failing = submit(eng, ["x", "y"], queue="fast", processor="fail")
    burst(eng, ["fast"])
    assert eng.status(failing)["state"] == "failed"
    staff.post(reverse("queueadmin:request_retry", args=[failing]))
    assert eng.status(failing)["state"] == "queued" and eng.status(failing)["failed"] == 0


# -- in flight -------------------------------------------------------------------------------------


def take_without_ack(eng, queue, wid):
    """Play a worker that takes one item (under the queue's lease) and never
    acknowledges it: a stalled or killed worker."""
    from queueadmin.core.engine.store.request_slot import TakeTerms

    cfg = eng.queue_config(queue)
    claimed = eng.store.queue.cycle(queue, wid, cfg.lease_ms, 1, aging=False, live_workers=1, least_share=1, lacks="",
                                    releases=[])
    assert claimed.tokens, "nothing to take"
    token = claimed.tokens[0]
    rid = token.rpartition("#")[0]
    terms = TakeTerms(wid, cfg.lease_ms, cfg.max_attempts, cfg.retention_ms, eng.channel)
    if eng.keys.in_queue_slot(rid):  # a one-item request
        (took,) = eng.store.queue.take_lean(queue, terms, [(rid, token)])
    else:
        took = eng.store.request.take(rid, terms, 1)
    ((entry, *_),) = took.items()
    return rid, entry


def register_worker(eng, wid, beat_ms, queues="default"):
    eng.redis.zadd(eng.keys.workers, {wid: beat_ms})
    eng.redis.hset(eng.keys.worker(wid), mapping={"host": "elsewhere", "pid": 1, "heartbeat": int(beat_ms),
                                                  "started": int(beat_ms), "queues": queues, "current": "[]"})


def test_inflight_lists_items_marks_stuck_ones_and_requeues(staff, eng):
    ok_rid = submit(eng, ["slow"])
    stuck_rid = submit(eng, ["stalled"], queue="fast")  # 1 s lease
    register_worker(eng, "ghost:1:aa", time.time() * 1000, "default,fast")
    _, ok_entry = take_without_ack(eng, "default", "ghost:1:aa")
    _, stuck_entry = take_without_ack(eng, "fast", "ghost:1:aa")
    eng.redis.zadd(eng.keys.workers, {"ghost:1:aa": time.time() * 1000 + 2000})  # still beating
    eng.redis.hset(eng.keys.worker("ghost:1:aa"), "heartbeat", int(time.time() * 1000 + 2000))
    time.sleep(1.4)
    page = staff.get(reverse("queueadmin:inflight"))
    rows = {r["entry"]: r for r in page.context["rows"]}
    assert rows[stuck_entry]["stuck"] and rows[stuck_entry]["lease_expired"], rows[stuck_entry]
    assert not rows[stuck_entry]["dead_worker"]
    assert not rows[ok_entry]["stuck"]
    assert page.context["stuck_count"] == 1
    assert [r["entry"] for r in staff.get(reverse("queueadmin:inflight"), {"stuck": "1"}).context["rows"]] == [stuck_entry]
    assert [r["entry"] for r in staff.get(reverse("queueadmin:inflight"), {"queue": "default"}).context["rows"]] == [ok_entry]
    ask = staff.post(reverse("queueadmin:inflight_requeue"), {"scope": "stuck", "filter": ""})
    assert ask.context["count"] == 1
    staff.post(reverse("queueadmin:inflight_requeue"), {"scope": "one", "ids": [f"{ok_rid}:{ok_entry}"]})
    assert eng.redis.zscore(eng.keys.request(ok_rid).leases, ok_entry) <= time.time() * 1000
    bad = staff.post(reverse("queueadmin:inflight_requeue"), {"scope": "selected", "ids": ["junk", "x:y"]}, follow=True)
    assert "Nothing selected" in bad.content.decode()
    assert stuck_rid


def test_requeue_of_a_dead_workers_item_gives_its_token_back(staff, eng):
    rid = submit(eng, ["a"], concurrency=1)
    wid = "gone:999999:ab"
    register_worker(eng, wid, time.time() * 1000)
    _, entry = take_without_ack(eng, "default", wid)
    eng.redis.zadd(eng.keys.workers, {wid: time.time() * 1000 - 3_600_000})  # its heartbeat stopped long ago
    eng.redis.hset(eng.keys.worker(wid), "heartbeat", int(time.time() * 1000 - 3_600_000))
    row = staff.get(reverse("queueadmin:inflight")).context["rows"][0]
    assert row["stuck"] and row["dead_worker"]
    assert eng.redis.hlen(eng.keys.queue("default").held) == 1
    staff.post(reverse("queueadmin:inflight_requeue"), {"scope": "one", "ids": [f"{rid}:{entry}"]})
    assert eng.redis.hlen(eng.keys.queue("default").held) == 0  # the dead worker's token is back
    w = burst(eng)
    assert eng.status(rid)["state"] == "completed" and w.processed == 1


# -- dead letters ----------------------------------------------------------------------------------


def test_dead_letters_show_error_and_traceback_retry_and_discard(staff, eng):
    rid = submit(eng, ["p", "q", "r"], queue="fast", processor="fail")
    burst(eng, ["fast"])
    page = staff.get(reverse("queueadmin:dead"))
    rows = page.context["rows"]
    assert len(rows) == 3 and "fail processor always fails" in rows[0]["error"] and "Traceback" in rows[0]["traceback"]
    assert "RuntimeError: fail processor always fails" in page.content.decode()
    staff.post(reverse("queueadmin:dead_action"), {"action": "retry", "scope": "one", "ids": [f"{rid}:{rows[0]['entry']}"]})
    assert eng.status(rid)["dead"] == 2
    ask = staff.post(reverse("queueadmin:dead_action"), {"op": "discard-all", "filter": "queue=fast"})
    assert ask.status_code == 200 and ask.context["count"] == 2 and "Discard 2 dead letters?" in ask.content.decode()
    assert eng.status(rid)["dead"] == 2
    staff.post(reverse("queueadmin:dead_action"), {"action": "discard", "scope": "all", "filter": "queue=fast", "confirm": "1"})
    assert eng.status(rid)["dead"] == 0 and eng.redis.hget(eng.keys.request(rid).meta, "discarded") == "2"
    assert staff.get(reverse("queueadmin:dead")).context["count"] == 0
    results = list(eng.results(rid))
    assert sum(1 for x in results if x.get("discarded")) == 2


def test_dead_letter_filter_by_request(staff, eng):
    a = submit(eng, ["1"], queue="fast", processor="fail")
    submit(eng, ["2"], queue="fast", processor="fail")
    burst(eng, ["fast"])
    assert [r["request"] for r in staff.get(reverse("queueadmin:dead"), {"request": a}).context["rows"]] == [a]
    assert staff.get(reverse("queueadmin:dead"), {"request": "<x>"}).status_code == 200


# -- scheduled ---------------------------------------------------------------------------------------


def test_scheduled_requests_run_now_and_cancel(staff, eng):
    a = submit(eng, ["a"], delay=3600)
    b = submit(eng, ["b"], delay=7200)
    rows = staff.get(reverse("queueadmin:scheduled")).context["rows"]
    assert [r["request"] for r in rows] == [a, b] and rows[0]["start_at"] > time.time() + 3500
    staff.post(reverse("queueadmin:scheduled_action"), {"action": "run", "ids": [a]})
    assert eng.redis.zscore(eng.keys.queue("default").sched, a) <= time.time() * 1000
    burst(eng)
    assert eng.status(a)["state"] == "completed"
    ask = staff.post(reverse("queueadmin:scheduled_action"), {"action": "cancel", "ids": [b]})
    assert ask.context["count"] == 1
    staff.post(reverse("queueadmin:scheduled_action"), {"action": "cancel", "ids": [b], "confirm": "1"})
    assert eng.status(b)["state"] == "cancelled"
    assert staff.get(reverse("queueadmin:scheduled")).context["rows"] == []


# -- workers and queues -------------------------------------------------------------------------------


def test_workers_page_flags_dead_workers(staff, eng):
    now = time.time() * 1000
    for wid, beat in (("live:1:aa", now), ("old:2:bb", now - 60_000)):
        eng.redis.zadd(eng.keys.workers, {wid: beat})
        eng.redis.hset(eng.keys.worker(wid), mapping={"host": "h", "pid": 1, "heartbeat": int(beat), "started": int(
            beat), "queues": "default", "current": json.dumps([{"request": "r1", "entry": "1-0", "index": 3,
                                                                 "started": time.time()}]), "processed": 7,
                                                              "failed": 1})
    rows = {w["id"]: w for w in staff.get(reverse("queueadmin:workers")).context["rows"]}
    assert rows["live:1:aa"]["live"] and rows["live:1:aa"]["processed"] == 7 and rows["live:1:aa"]["current"]
    assert rows["old:2:bb"]["dead"] and not rows["old:2:bb"]["current"]


def test_pause_and_resume_a_queue(staff, eng):
    from queueadmin.core.models import Queue

    staff.post(reverse("queueadmin:queue_pause", args=["default"]), {"paused": "1"})
    assert eng.queue_config("default").paused and Queue.objects.get(name="default").paused
    assert "paused" in staff.get(reverse("queueadmin:queues")).content.decode()
    staff.post(reverse("queueadmin:queue_pause", args=["fast"]), {"paused": "1"})  # a queue known only to Redis
    assert eng.queue_config("fast").paused
    staff.post(reverse("queueadmin:queue_pause", args=["default"]), {"paused": "0"})
    assert not eng.queue_config("default").paused
    assert staff.post(reverse("queueadmin:queue_pause", args=["nope"]), {"paused": "1"}, follow=True).status_code == 200
