"""The dead letters page's search (error text, processor, queue, time) and
"act on all N that match" as a bulk job with progress; the bulk job page;
the queue-level clear. Dead letters are made directly through the engine
(tests/engine/client/test_bulk.py's make_dead), not by workers."""
from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from django.http import QueryDict

from queueadmin.core import bulkjobs, deadfilter, queries
from queueadmin.core.audit import AuditEntry
from tests.engine.client.test_bulk import make_dead
from tests.engine_helpers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def job_of(response) -> str:
    return re.search(r"bulk=([0-9a-f]+)", response["Location"])[1]


def test_search_by_error_text_is_case_insensitive_and_in_the_url(staff, eng):
    make_dead(eng, 12, error=lambda i: "ReadTimeout: slow" if i % 4 == 0 else "KeyError: x")
    page = staff.get("/dead/", {"error": "timeout"})
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count("ReadTimeout: slow") == 3 and "KeyError" not in html
    assert "3 matches" in html
    assert 'value="timeout"' in html  # the filter stays in the form, and in the links
    assert "error=timeout" in html


def test_processor_and_time_filters(staff, eng):
    make_dead(eng, 3, processor="echo", error=lambda i: "A-error", finished_at=lambda i: 1_700_000_000 + i)
    make_dead(eng, 2, processor="uppercase", error=lambda i: "B-error", finished_at=lambda i: 1_800_000_000)
    html = staff.get("/dead/", {"processor": "uppercase"}).content.decode()
    assert "B-error" in html and "A-error" not in html and "2 dead letters" in html
    html = staff.get("/dead/", {"from": "1700000001", "to": "1700000002"}).content.decode()
    assert html.count("A-error") == 2 and "B-error" not in html


@pytest.mark.parametrize("params,message", [
    ({"from": "yesterday"}, "is not a date or time"), ({"queue": "nope"}, "There is no queue named"),
    ({"from": "2026-02-01", "to": "2026-01-01"}, "after the to time"), ({"request": "bad id!"}, "A request id"),
    ({"error": "x" * 300}, "at most 200 characters"), ({"cursor": "zz", "error": "a"}, "cursor must be")])
def test_bad_filters_get_a_clear_message_not_a_500(staff, eng, params, message):
    response = staff.get("/dead/", params)
    assert response.status_code in (200, 400)
    assert message in response.content.decode()


def test_a_search_past_its_budget_says_n_plus_and_pages_by_cursor(staff, eng, monkeypatch):
    from queueadmin.core.queries import dead as dead_queries
    monkeypatch.setattr(dead_queries, "SEARCH_BUDGET", 100)  # a page looks at 100 letters, not 5,000
    make_dead(eng, 300, error=lambda i: "Timeout")
    html = staff.get("/dead/", {"error": "timeout"}).content.decode()
    assert "100+ matches" in html
    cursor = re.search(r'href="\?[^"]*cursor=([0-9%A]+)" [^>]*id="next-page"', html)[1]
    second = staff.get("/dead/", {"error": "timeout", "cursor": cursor.replace("%3A", ":")}).content.decode()
    assert "First page" in second and "100+ matches" in second


def test_act_on_all_that_match_confirms_n_then_runs_a_bulk_job(staff, eng):
    rid = make_dead(eng, 1200, error=lambda i: "Timeout" if i % 2 else "other")
    filt = "error=timeout"
    ask = staff.post("/dead/action/", {"op": "retry-all", "filter": filt})
    assert ask.status_code == 200
    assert "Retry 600 dead letters? All that match this filter" in ask.content.decode()
    done = staff.post("/dead/action/", {"action": "retry", "scope": "all", "filter": filt, "confirm": "1"})
    assert done.status_code == 302
    jid = job_of(done)
    job = wait_for(lambda: (j := bulkjobs.jobs().get(jid)) and j["over"] and j, timeout=60)
    assert job["state"] == "done" and job["done"] == 600
    assert eng.redis.zcard(eng.keys.request(rid).dead) == 600
    page = staff.get(done["Location"]).content.decode()
    assert "600 dead letters sent back to run" in page
    assert AuditEntry.objects.filter(action="bulk_retry_dead", count=600).exists()
    progress = staff.get(f"/bulk/{jid}/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="bulk-progress")
    assert progress.status_code == 200 and 'data-bulk-state="done"' in progress.content.decode()
    assert "hx-trigger" not in progress.content.decode()  # over: the panel stops polling


def test_bulk_pages_refuse_bad_ids_and_viewers(client, staff, eng):
    assert staff.get("/bulk/nope/").status_code == 404
    assert staff.get("/bulk/0123456789abcdef/").status_code == 404
    viewer = User.objects.create_user("v", password="pw", is_staff=True)
    client.force_login(viewer)
    assert client.post("/dead/action/", {"op": "retry-all", "filter": ""}).status_code == 403
    assert client.post("/queues/default/clear/", {}).status_code == 403


def test_queue_clear_confirms_n_and_cancels_every_live_request(staff, eng):
    eng.set_paused("default", True)
    subs = [eng.submit("default", "echo", list(range(5)), dedup=False) for _ in range(3)]
    subs += [eng.submit("default", "echo", [i], dedup=False) for i in range(4)]  # waiting packed: no index entry
    ask = staff.post("/queues/default/clear/", {})
    assert ask.status_code == 200 and "19" in ask.content.decode() and "7 live requests" in ask.content.decode()
    done = staff.post("/queues/default/clear/", {"confirm": "1"})
    assert done.status_code == 302 and "/bulk/" in done["Location"]
    wait_for(lambda: all(eng.status(s.id)["state"] == "cancelled" for s in subs), timeout=30)
    assert "7 requests cancelled" in staff.get(done["Location"]).content.decode()
    assert not eng.redis.exists(eng.keys.queue("default").packed)  # counted out as cancelled
    assert staff.post("/queues/nope/clear/", {}, follow=True).status_code == 200


@hsettings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from(["error", "processor", "queue", "from", "to", "request", "cursor", "page",
                                        "bulk"]), st.text(max_size=40)))
def test_any_filter_input_gets_no_5xx_and_accepted_filters_round_trip(staff, eng, params):
    params = {k: v.replace("\x00", "") for k, v in params.items()}
    response = staff.get("/dead/", params)
    assert response.status_code in (200, 400)
    html = response.content.decode()
    # what the page accepted is what its links carry: parsing its own query again gives the same filter
    parsed = deadfilter.parse(params, queries.queue_names())
    again = deadfilter.parse(QueryDict(urlencode(parsed.query())), queries.queue_names())
    assert again.flt == parsed.flt and again.request == parsed.request and not again.errors
    assert "Traceback" not in html


def test_cancel_all_matching_requests_is_a_bulk_job_past_one_batch(staff, eng):
    from queueadmin.core import operations
    eng.set_paused("default", True)
    few = [operations.submit("default", "echo", [i], dedup=False).id for i in range(3)]
    ask = staff.post("/requests/bulk/", {"scope": "all", "filter": "queue=default"})
    assert ask.status_code == 200 and "Cancel 3 requests?" in ask.content.decode()
    done = staff.post("/requests/bulk/", {"scope": "all", "filter": "queue=default", "confirm": "1"}, follow=True)
    assert "Cancelled 3 request(s)." in done.content.decode()  # one batch: done at once, back on the list
    assert all(eng.status(rid)["state"] == "cancelled" for rid in few)
    many = [operations.submit("default", "echo", [i], dedup=False).id for i in range(510)]
    started = staff.post("/requests/bulk/", {"scope": "all", "filter": "queue=default", "confirm": "1"})
    assert "/bulk/" in started["Location"]  # more than a batch: the job's page shows its progress
    wait_for(lambda: all(eng.status(rid)["state"] == "cancelled" for rid in many[-5:]), timeout=60)
    job = wait_for(lambda: (j := bulkjobs.jobs().get(started["Location"].rstrip("/").rsplit("/", 1)[1])) and j["over"] and j)
    assert job["done"] == 510 and job["targets"] == 510
    # each request the job touched has its own entry, written a batch at a time
    entries = AuditEntry.objects.filter(action="cancel", request_id__in=many)
    assert entries.count() == 510 and set(entries.values_list("source", flat=True)) == {"dashboard"}


def test_a_job_whose_web_process_ended_is_resumed_when_its_progress_is_read(staff, eng):
    """A job left running with no runner (its process ended mid-job: its lease
    lapsed) goes on from its saved cursor at the next look at its progress."""
    from queueadmin.core.engine.client.bulk import BulkRun
    from queueadmin.core.engine.client.deadscan import DeadFilter
    rid = make_dead(eng, 1500)
    jobs = bulkjobs.jobs()
    jid = jobs.create("dead", "discard", [rid], flt=DeadFilter(), expected=1500)
    first = BulkRun(jobs, bulkjobs.dead_scan(), jid, lambda pairs: (len(pairs), 0))  # a batch "done", then the end
    assert jobs.claim(jid, first.runner) and first.step()
    eng.redis.delete(eng.keys.bulk_runner(jid))  # the lease lapsed with its process
    page = staff.get(f"/bulk/{jid}/")
    assert page.status_code == 200
    job = wait_for(lambda: (j := jobs.get(jid)) and j["over"] and j, timeout=60)
    assert job["state"] == "done" and job["looked"] == 1500
    assert eng.redis.zcard(eng.keys.request(rid).dead) == 500  # the first batch was "done" by a runner that acted on nothing
