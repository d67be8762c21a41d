"""The rough edges of issue 22, each with the test that would have caught
it: a request of a paused queue says paused (no ETA); the cancel dialog
says what happens to running items; an item waiting for its retry (a
stopped one too) says so instead of "running" beside its error, and "In
flight" counts what runs, never more than the concurrency; a live
request's page opens where it is, not on its oldest finished items; the
submit form starts on a quick processor and takes N copies or a range.
Real redis-server and in-process workers."""
from __future__ import annotations

import re
import threading
import time

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queueadmin.core import queries, services
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.worker import Worker
from tests.engine_helpers import ALL_PROCESSORS, wait_for
from tests.views.test_views import register_worker, submit, take_without_ack

pytestmark = pytest.mark.django_db

RANGE = re.compile(r"^\s*(-?\d+)\s*(?:-|\.\.|–)\s*(-?\d+)\s*$")  # what a person means by a range
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def test_a_request_of_a_paused_queue_says_paused_and_shows_no_eta(staff, eng):
    rid = submit(eng, ["a", "b", "c"])
    now = time.time()
    running = {"state": "running", "queue": "default", "total": 10, "done": 5, "started_at": now - 10}
    assert queries.with_rates(dict(running), now)["eta"] == pytest.approx(10)
    eng.set_paused("default", True)
    time.sleep(2.1)  # the client's cached configuration (2 s)
    st = queries.with_rates(dict(running), now)
    assert st["paused"] and st["eta"] is None
    body = staff.get(reverse("queueadmin:request_detail", args=[rid])).content.decode()
    assert 'id="state" data-announce-now>paused</span>' in body and "queue paused" in body
    rows = staff.get(reverse("queueadmin:requests")).content.decode()
    assert ">paused</span>" in rows and " left" not in rows


def test_the_cancel_dialog_says_running_items_are_stopped(staff, eng):
    rid = submit(eng, ["a", "b"])
    text = staff.post(reverse("queueadmin:request_cancel", args=[rid]), HTTP_HX_REQUEST="true").content.decode()
    assert "stopped within about a second" in text and "in flight finish" not in text


@pytest.fixture
def running_worker(eng):
    """A real worker (in-process, on a thread) until the test ends; its
    queue `slowretry` retries after a minute."""
    eng.define_queue("slowretry", QueueConfig(max_attempts=3, backoff_seconds=60, backoff_max_seconds=60))
    worker = Worker(eng, ["default", "slowretry"], Processors(ALL_PROCESSORS), install_signals=False, threads=4,
                    heartbeat=0.2)
    thread = threading.Thread(target=worker.work, daemon=True)
    thread.start()
    yield worker
    worker.stop()
    thread.join(15)


def test_items_waiting_to_retry_are_not_running_nor_counted_in_flight(staff, eng, running_worker):
    rid = submit(eng, [f"x{i}" for i in range(5)], queue="slowretry", processor="fail", concurrency=4)
    wait_for(lambda: eng.status(rid)["in_flight"] == 5 and all(
        r.get("status") == "retrying" for r in eng.items(rid)), 20, message="five items waiting to retry")
    ctx = staff.get(reverse("queueadmin:request_detail", args=[rid])).context
    assert ctx["st"]["in_flight"] == 5  # held: what the engine counts
    assert (ctx["st"]["running"], ctx["st"]["held_waiting"]) == (0, 5)  # shown: 0 running, 5 to run again
    statuses = {row["status"] for row in ctx["items"]["rows"]}
    assert statuses == {"retrying"}, statuses  # not "running" beside their error
    assert all(row["error"] for row in ctx["items"]["rows"])


def test_a_stopped_item_says_retrying_beside_its_error(staff, eng, running_worker):
    rid = submit(eng, [30], queue="slowretry", processor="sleep")
    wait_for(lambda: queries.request_view(rid)["running"] == 1, 20, message="the item running")
    (row,) = staff.get(reverse("queueadmin:request_detail", args=[rid])).context["items"]["rows"]
    assert row["status"] == "running" and not row["error"]
    assert eng.stop_item(rid, row["entry"])
    wait_for(lambda: (eng.items(rid)[0].get("status") == "retrying"), 20, message="the stop recorded")

    def shown():  # within a heartbeat (0.2 s here) the worker no longer reports it running
        (row,) = staff.get(reverse("queueadmin:request_detail", args=[rid])).context["items"]["rows"]
        return row if row["status"] != "running" else None

    row = wait_for(shown, 5, message="the row no longer running")
    assert row["status"] == "retrying" and "stopped" in row["error"]


def test_a_live_requests_page_opens_on_its_items_in_flight(staff, eng):
    rid = submit(eng, [f"item {i}" for i in range(300)], concurrency=1)
    register_worker(eng, "ghost:1:aa", time.time() * 1000)
    rk = eng.keys.request(rid)
    entries = [e for e, _ in eng.redis.xrange(rk.items, count=300)]
    # play the first 120 items done: delivered and acknowledged
    eng.redis.xreadgroup("g", "ghost:1:aa", {rk.items: ">"}, count=120)
    eng.redis.xack(rk.items, "g", *entries[:120])
    _, held = take_without_ack(eng, "default", "ghost:1:aa")
    assert held == entries[120]
    rows = staff.get(reverse("queueadmin:request_detail", args=[rid])).context["items"]["rows"]
    assert rows[0]["entry"] == held and rows[0]["index"] == 120
    first = staff.get(reverse("queueadmin:request_detail", args=[rid]) + "?after=0-0").context["items"]["rows"]
    assert first[0]["index"] == 0  # the first page is a click away
    finished = submit(eng, ["only"])
    assert staff.get(reverse("queueadmin:request_detail", args=[finished])).context["items"]["rows"][0]["index"] == 0


def test_the_submit_form_starts_on_a_quick_processor_and_takes_copies_and_ranges(staff, eng):
    body = staff.get(reverse("queueadmin:submit")).content.decode()
    assert '<option value="uppercase" selected>' in body and 'name="copies"' in body and 'name="item_range"' in body
    url = reverse("queueadmin:submit")
    resp = staff.post(url, {"queue": "default", "processor": "echo", "items": "a\nb", "copies": "3"})
    assert resp.status_code == 302
    assert [i["payload"] for i in eng.items(resp["Location"].rstrip("/").split("/")[-1], 0, 10)] == ["a", "b"] * 3
    resp = staff.post(url, {"queue": "default", "processor": "echo", "item_range": "5-9", "copies": "2"})
    rid = resp["Location"].rstrip("/").split("/")[-1]
    assert [i["payload"] for i in eng.items(rid, 0, 20)] == [5, 6, 7, 8, 9] * 2
    for bad, field in (({"item_range": "9-5"}, "smaller"), ({"item_range": "1-x"}, "first-last"),
                       ({"item_range": "1-3", "items": "a"}, "not several"),
                       ({"items": "a\nb", "copies": "60000"}, "at most")):
        resp = staff.post(url, {"queue": "default", "processor": "echo", **bad})
        assert resp.status_code == 200 and field in resp.content.decode()


@FUZZ
@given(item_range=st.one_of(st.text(max_size=25), st.from_regex(r"\A-?\d{1,6} ?- ?-?\d{1,6}\Z")),
       copies=st.one_of(st.text(max_size=6), st.integers(-5, 200_000).map(str)))
def test_any_range_and_copies_get_a_page_and_what_is_accepted_round_trips(staff, eng, item_range, copies):
    resp = staff.post(reverse("queueadmin:submit"), {"queue": "default", "processor": "echo",
                                                      "item_range": item_range, "copies": copies})
    assert resp.status_code in (200, 302)
    if resp.status_code == 302:
        rid = resp["Location"].rstrip("/").split("/")[-1]
        first, last = (int(n) for n in RANGE.match(item_range).groups())
        assert eng.status(rid)["total"] == (last - first + 1) * int(copies.strip() or 1)
        services.engine().cancel(rid)


def test_the_stop_dialog_names_the_item_by_its_index_without_a_giant_count(staff, eng):
    rid = submit(eng, ["a", "b"])
    register_worker(eng, "ghost:1:aa", time.time() * 1000)
    _, entry = take_without_ack(eng, "default", "ghost:1:aa")
    text = staff.post(reverse("queueadmin:inflight_stop"), {"ids": f"{rid}:{entry}"},
                      HTTP_HX_REQUEST="true").content.decode()
    assert f"Stop item #0 of request {rid}?" in text and entry not in text.split("<form")[0]
    assert "data-confirm-count" not in text
