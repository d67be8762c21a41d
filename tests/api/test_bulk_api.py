"""The API's search and bulk actions by filter (core/api/bulk.py): dead
letters searched by error text, processor, queue and time with a cursor;
retry, discard, cancel, requeue and queue clear as bulk jobs with progress;
scopes; the OpenAPI schema; bad filters get a clear 400, never a 5xx.
Dead letters are made directly through the engine (tests/engine/client/test_bulk.py)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from queueadmin.core import operations
from queueadmin.core.audit import AuditEntry
from tests.api_helpers import Api, token_for
from tests.engine.client.test_bulk import make_dead
from tests.engine_helpers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]
PATHS = {"/api/v1/dead-letters": ("get", "read"), "/api/v1/bulk/dead-letters/{action}": ("post", "steer"),
         "/api/v1/bulk/requests/cancel": ("post", "steer"), "/api/v1/bulk/in-flight/requeue": ("post", "steer"),
         "/api/v1/queues/{name}/clear": ("post", "steer"), "/api/v1/bulk/{jid}": ("get", "read")}


def test_search_and_page_by_cursor(eng, api):
    make_dead(eng, 30, error=lambda i: "ReadTimeout" if i % 3 == 0 else "KeyError", finished_at=lambda i: 1_700_000_000 + i)
    got = api.get("/api/v1/dead-letters?error=timeout&limit=4")
    assert got.status_code == 200, got.content
    body = got.json()
    assert body["count"] == 10 and body["count_exact"] and len(body["items"]) == 4
    assert all("ReadTimeout" in x["error"] for x in body["items"]) and body["filter"] == {"error": "timeout"}
    seen = [x["index"] for x in body["items"]]
    while body["next_cursor"]:
        body = api.get(f"/api/v1/dead-letters?error=timeout&limit=4&cursor={body['next_cursor']}").json()
        seen += [x["index"] for x in body["items"]]
    assert sorted(seen) == list(range(0, 30, 3))
    ranged = api.get("/api/v1/dead-letters?from=1700000010&to=1700000012").json()
    assert sorted(x["index"] for x in ranged["items"]) == [10, 11, 12]
    assert api.get("/api/v1/dead-letters?processor=echo").json()["count"] == 30


@pytest.mark.parametrize("query", ["from=yesterday", "queue=nope", "request=a%20b", "cursor=zz&error=x",
                                   "from=2026-02-01&to=2026-01-01", "limit=0", "limit=x", "error=" + "x" * 201])
def test_bad_filters_are_a_clear_400(eng, api, query):
    answer = api.get(f"/api/v1/dead-letters?{query}")
    assert answer.status_code == 400, (query, answer.content)
    assert answer.json()["error"]


def test_retry_all_matching_is_a_bulk_job_with_progress_and_audit(eng, api):
    rid = make_dead(eng, 1100, error=lambda i: "Timeout" if i % 2 else "other")
    answer = api.post("/api/v1/bulk/dead-letters/retry", {"filter": {"error": "TIMEOUT"}})
    assert answer.status_code == 202, answer.content
    job = answer.json()
    assert job["kind"] == "dead" and job["expected"] == 550 and job["exact"]
    final = wait_for(lambda: (j := api.get(f"/api/v1/bulk/{job['id']}").json())["state"] != "running" and j, timeout=60)
    assert final["state"] == "done" and final["done"] == 550
    assert eng.redis.zcard(eng.keys.request(rid).dead) == 550
    entry = AuditEntry.objects.get(action="bulk_retry_dead")
    assert entry.source == "api" and entry.count == 550
    assert api.post("/api/v1/bulk/dead-letters/explode", {}).status_code == 404
    assert api.post("/api/v1/bulk/dead-letters/discard", {"filter": {"from": "never"}}).status_code == 400
    assert api.post("/api/v1/bulk/dead-letters/discard", {"filter": {"colour": "red"}}).status_code == 400
    assert api.get("/api/v1/bulk/nope").status_code == 404


def test_cancel_matching_requeue_stuck_and_clear(eng, api):
    eng.set_paused("default", True)
    rids = [operations.submit("default", "echo", [i], dedup=False).id for i in range(3)]
    job = api.post("/api/v1/bulk/requests/cancel", {"filter": {"queue": "default", "state": "live"}}).json()
    assert job["state"] == "done" and job["done"] == 3  # one batch: done before the answer
    assert all(eng.status(r)["state"] == "cancelled" for r in rids)
    assert api.post("/api/v1/bulk/requests/cancel", {"filter": {"state": "sleeping"}}).status_code == 400
    more = [operations.submit("default", "echo", [1, 2], dedup=False).id for _ in range(2)]
    cleared = api.post("/api/v1/queues/default/clear").json()
    assert cleared["kind"] == "clear" and cleared["expected"] == 2 and cleared["done"] == 2  # requests
    assert AuditEntry.objects.get(action="clear_queue").count == 4  # their items
    assert all(eng.status(r)["state"] == "cancelled" for r in more)
    assert api.post("/api/v1/queues/nope/clear").status_code == 404
    requeued = api.post("/api/v1/bulk/in-flight/requeue", {"queue": "default"}).json()
    assert requeued["state"] == "done" and requeued["expected"] == 0
    assert api.post("/api/v1/bulk/in-flight/requeue", {"queue": "nope"}).status_code == 404


def test_every_operation_is_in_the_schema_with_its_scope(client, eng):
    schema = client.get("/api/openapi.json").json()
    for path, (method, scope) in PATHS.items():
        op = schema["paths"][path][method]
        assert op["description"].startswith(f"Scope: {scope}"), path


@pytest.mark.parametrize("path", [p for p, (m, _) in PATHS.items() if m == "post"])
def test_actions_need_the_steer_scope(eng, path):
    url = path.format(action="retry", name="default")
    assert Api(token_for(f"reader{len(path)}", scopes="read")).post(url, {}).status_code == 403
    assert Api(None).post(url, {}).status_code == 401
    assert Api(token_for(f"steerer{len(path)}", scopes="steer")).get("/api/v1/dead-letters").status_code == 403
    assert not AuditEntry.objects.exists()


@hsettings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from(["error", "processor", "queue", "from", "to", "request", "cursor", "limit"]),
                       st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)))
def test_any_search_input_is_a_200_or_a_clear_400(eng, api, params):
    from urllib.parse import urlencode
    answer = api.get("/api/v1/dead-letters?" + urlencode(params))
    assert answer.status_code in (200, 400), (params, answer.content)
    body = answer.json()
    if answer.status_code == 400:
        assert body["error"]
        return
    # the filter as understood round-trips: asking with it again gives the same filter
    again = api.get("/api/v1/dead-letters?" + urlencode(body["filter"]))
    assert again.status_code == 200 and again.json()["filter"] == body["filter"]


@hsettings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.dictionaries(st.sampled_from(["error", "processor", "queue", "from", "to", "request", "colour"]),
                                 st.one_of(st.text(max_size=30), st.integers(), st.none(), st.booleans())),
                 st.lists(st.integers(), max_size=3), st.text(max_size=20)))
def test_any_bulk_body_is_a_202_or_a_clear_4xx(eng, api, flt):
    answer = api.post("/api/v1/bulk/dead-letters/discard", {"filter": flt})
    assert answer.status_code in (202, 400), (flt, answer.content)
    if answer.status_code == 202:
        assert answer.json()["kind"] == "dead"
    else:
        assert answer.json()["error"]
