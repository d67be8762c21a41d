"""The JSON API: every endpoint, every kind of bad input (never a 500),
bearer-token auth and roles, against the real redis-server of conftest.

Roles, as chosen for the API: any active user's token may read (status,
results, queues); acting (submit, cancel, priority, concurrency) needs
`core.auth.can_act` (superuser or queueadmin.change_requestrecord), else 403.
"""
from __future__ import annotations

import json
import random

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.test import AsyncClient, Client

from queueadmin.core import conf
from queueadmin.core import embedded, services
from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.worker import Worker
from queueadmin.core.models import ApiToken, Queue, RequestRecord
from tests.api_helpers import Api

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]


# -- fixtures and helpers ------------------------------------------------------


def make_user(username, *, act=False, superuser=False, active=True):
    user = User.objects.create_user(username, password="pw", is_staff=True, is_superuser=superuser,
                                    is_active=active)
    if act:
        user.user_permissions.add(Permission.objects.get(codename="change_requestrecord"))
    return user


@pytest.fixture
def viewer_key(db):
    return ApiToken.issue(make_user("viewer"), "read only")[1]


def submit(api, **fields):
    body = {"queue": "default", "processor": "uppercase", "items": ["a", "b", "c"], **fields}
    return api.post("/api/requests", body)


def run_burst(queues=("default",)):
    worker = Worker(services.engine(), list(queues), Processors(conf.processors()), burst=True,
                    heartbeat=0.2, install_signals=False, on_finish=services.record)
    worker.work()


# -- submit --------------------------------------------------------------------


def test_submit_creates_a_request_and_records_it(engine, api):
    response = submit(api, priority=70, concurrency=2)
    assert response.status_code == 201
    body = response.json()
    assert body["duplicate"] is False and body["scheduled"] is False
    assert body["state"] == "queued" and body["total"] == 3
    assert body["priority"] == 70 and body["concurrency"] == 2
    assert response["Location"] == f"/api/requests/{body['id']}"
    record = RequestRecord.objects.get(pk=body["id"])
    assert record.submitted_by.username == "producer"
    assert record.total == 3 and "a" in record.items_preview


def test_duplicate_submission_returns_the_existing_request(engine, api):
    first = submit(api).json()["id"]
    again = submit(api)
    assert again.status_code == 200
    assert again.json()["id"] == first and again.json()["duplicate"] is True
    assert RequestRecord.objects.count() == 1


def test_explicit_dedup_key_and_opting_out(engine, api):
    first = submit(api, dedup_key="nightly-42").json()["id"]
    other_items = submit(api, items=["x"], dedup_key="nightly-42")
    assert other_items.status_code == 200 and other_items.json()["id"] == first
    a = submit(api, items=["same"], dedup=False).json()["id"]
    b = submit(api, items=["same"], dedup=False).json()["id"]
    assert a != b


def test_delay_and_expiry(engine, api):
    body = submit(api, delay_seconds=60, expires_in_seconds=3600).json()
    assert body["state"] == "scheduled" and body["scheduled"] is True
    assert body["not_before"] - body["created_at"] == pytest.approx(60, abs=1)
    assert body["expires_at"] - body["created_at"] == pytest.approx(3600, abs=1)


def test_items_may_be_any_json_values(engine, api):
    items = [{"a": [1, 2]}, 3.5, None, True, "é ✓", [["nested"]]]
    rid = submit(api, processor="echo", items=items).json()["id"]
    run_burst()
    lines = api.get(f"/api/requests/{rid}/results")
    records = [json.loads(x) for x in b"".join(lines.streaming_content).decode().splitlines()]
    assert [r["result"] for r in records] == items


def test_queues_configured_only_in_the_database_are_pushed_on_use(redis_url, api):
    """A fresh install: the `default` row exists (migration), Redis knows nothing
    until a worker runs sync_queues; the API must not call it unknown."""
    Queue.objects.bulk_create([Queue(name="reports", concurrency=4)])  # no post_save: not in Redis
    client = services.engine()
    assert client.queues() == []
    names = [q["name"] for q in api.get("/api/queues").json()["queues"]]
    assert names == ["default", "reports"]
    assert client.queue_config("reports").concurrency == 4
    client.redis.flushdb()
    assert submit(api, queue="reports").status_code == 201


def test_csrf_does_not_apply_to_token_requests(engine, key):
    response = submit(Api(key, Client(enforce_csrf_checks=True)))
    assert response.status_code == 201


# -- status and results ----------------------------------------------------------


def test_status_from_redis_then_from_history(engine, api, r):
    rid = submit(api).json()["id"]
    live = api.get(f"/api/requests/{rid}")
    assert live.status_code == 200
    assert live.json()["id"] == rid and live.json()["archived"] is False and live.json()["total"] == 3
    r.flushdb()  # as if Redis had cleaned the request up after its retention
    archived = api.get(f"/api/requests/{rid}")
    assert archived.status_code == 200
    assert archived.json()["archived"] is True and archived.json()["state"] == "queued"
    assert archived.json()["total"] == 3


@pytest.mark.parametrize("rid", ["00000000000deadbe", "nope", "a" * 40, "x.y", "%7Bq%7D"])
def test_unknown_request_is_404(engine, api, rid):
    for suffix in ("", "/results"):
        response = api.get(f"/api/requests/{rid}{suffix}")
        assert response.status_code == 404 and "error" in response.json()
    for suffix, body in (("/cancel", None), ("/priority", {"priority": 5}), ("/concurrency", {"concurrency": 2})):
        response = api.post(f"/api/requests/{rid}{suffix}", body or {})
        assert response.status_code == 404, suffix


def test_results_are_json_lines_like_the_client(engine, api):
    rid = submit(api, items=["a", "b", "c"]).json()["id"]
    pending = api.get(f"/api/requests/{rid}/results")
    assert pending.status_code == 200 and pending["Content-Type"] == "application/x-ndjson"
    assert pending.streaming
    assert [json.loads(x)["status"] for x in b"".join(pending.streaming_content).splitlines()] == ["pending"] * 3
    run_burst()
    done = api.get(f"/api/requests/{rid}/results")
    lines = b"".join(done.streaming_content).decode().splitlines()
    assert [json.loads(x) for x in lines] == list(engine.results(rid))
    assert [json.loads(x)["result"] for x in lines] == ["A", "B", "C"]
    assert api.get(f"/api/requests/{rid}").json()["state"] == "completed"


def test_results_of_a_cleaned_up_request_are_gone(engine, api, r):
    rid = submit(api).json()["id"]
    r.flushdb()
    response = api.get(f"/api/requests/{rid}/results")
    assert response.status_code == 410 and "no longer kept" in response.json()["error"]


# -- steering ----------------------------------------------------------------------


def test_cancel(engine, api):
    rid = submit(api).json()["id"]
    response = api.post(f"/api/requests/{rid}/cancel")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    assert RequestRecord.objects.get(pk=rid).state == "cancelled"
    again = api.post(f"/api/requests/{rid}/cancel")
    assert again.status_code == 409 and "cancelled" in again.json()["error"]
    results = b"".join(api.get(f"/api/requests/{rid}/results").streaming_content).splitlines()
    assert {json.loads(x)["status"] for x in results} == {"cancelled"}


def test_priority_and_concurrency(engine, api):
    rid = submit(api, priority=10).json()["id"]
    response = api.post(f"/api/requests/{rid}/priority", {"priority": 90})
    assert response.status_code == 200 and response.json()["priority"] == 90
    assert engine.status(rid)["priority"] == 90
    assert engine.live_requests("default")[rid]["priority"] == 90
    assert RequestRecord.objects.get(pk=rid).priority == 90
    response = api.post(f"/api/requests/{rid}/concurrency", {"concurrency": 7})
    assert response.status_code == 200 and engine.status(rid)["concurrency"] == 7


@pytest.mark.parametrize("body, message", [
    ({"priority": 100}, "between 0 and 99"),
    ({"priority": -1}, "between 0 and 99"),
    ({"priority": "5"}, "between 0 and 99"),
    ({"priority": True}, "between 0 and 99"),
    ({"priority": 1.5}, "between 0 and 99"),
    ({"priority": None}, "between 0 and 99"),
    ({}, "between 0 and 99"),
    ({"priority": 5, "extra": 1}, "unknown field"),
])
def test_bad_priority(engine, api, body, message):
    rid = submit(api).json()["id"]
    response = api.post(f"/api/requests/{rid}/priority", body)
    assert response.status_code == 400 and message in response.json()["error"]


def test_finished_requests_cannot_be_steered(engine, api, r):
    rid = submit(api).json()["id"]
    run_burst()
    for suffix, body in (("/cancel", None), ("/priority", {"priority": 5}), ("/concurrency", {"concurrency": 2})):
        response = api.post(f"/api/requests/{rid}{suffix}", body)
        assert response.status_code == 409 and "completed" in response.json()["error"], suffix
    r.flushdb()  # only the history knows it now
    response = api.post(f"/api/requests/{rid}/priority", {"priority": 5})
    assert response.status_code == 409 and "no longer in the queue" in response.json()["error"]


# -- queues ------------------------------------------------------------------------


def test_queues_lists_stats_and_config(engine, api):
    submit(api, priority=80)
    submit(api, items=["later"], delay_seconds=600)
    response = api.get("/api/queues")
    assert response.status_code == 200
    (default,) = [q for q in response.json()["queues"] if q["name"] == "default"]
    assert default["depth"] == 3 and default["depth_by_priority"] == {"80": 3}
    assert default["scheduled"] == 1 and default["requests"] == 2
    assert default["config"]["lease_seconds"] == 60.0 and default["config"]["paused"] is False


# -- bad input -----------------------------------------------------------------------


BASE = {"queue": "default", "processor": "uppercase", "items": ["a"]}


@pytest.mark.parametrize("change, message", [
    ({"queue": "nope"}, "unknown queue"),
    ({"queue": "{q:default}"}, "unknown queue"),
    ({"queue": "x" * 65}, "too long"),
    ({"queue": 5}, "queue must be a string"),
    ({"queue": ""}, "queue must not be empty"),
    ({"queue": None}, "queue is required"),
    ({"processor": "nope"}, "unknown processor"),
    ({"processor": ["echo"]}, "processor must be a string"),
    ({"items": []}, "at least one item"),
    ({"items": "abc"}, "items must be a list"),
    ({"items": {"a": 1}}, "items must be a list"),
    ({"items": None}, "items is required"),
    ({"priority": 100}, "priority must be an integer between 0 and 99"),
    ({"priority": -1}, "priority must be an integer"),
    ({"priority": "high"}, "priority must be an integer"),
    ({"priority": False}, "priority must be an integer"),
    ({"concurrency": 0}, "concurrency must be an integer between 1"),
    ({"concurrency": 10**6}, "concurrency must be an integer between 1"),
    ({"delay_seconds": -1}, "delay_seconds must be a number"),
    ({"delay_seconds": "soon"}, "delay_seconds must be a number"),
    ({"delay_seconds": 10**12}, "at most 10 years"),
    ({"expires_in_seconds": 0}, "more than 0"),
    ({"expires_in_seconds": 5, "delay_seconds": 10}, "greater than delay_seconds"),
    ({"dedup_key": 5}, "dedup_key must be a string"),
    ({"dedup_key": ""}, "dedup_key must not be empty"),
    ({"dedup_key": "k" * 201}, "too long"),
    ({"dedup": "no"}, "dedup must be true or false"),
    ({"prio": 5}, "unknown field(s): 'prio'"),
])
def test_bad_submissions_say_what_is_wrong(engine, api, change, message):
    body = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    response = api.post("/api/requests", body)
    assert response.status_code == 400, response.content
    assert message in response.json()["error"]
    assert RequestRecord.objects.count() == 0


@pytest.mark.parametrize("raw, message", [
    ("", "empty body"),
    ("   ", "empty body"),
    ("{", "malformed JSON"),
    ("{'queue': 'default'}", "malformed JSON"),
    ("[1, 2]", "must be a JSON object, not a list"),
    ('"text"', "must be a JSON object, not a string"),
    ("null", "must be a JSON object, not null"),
    ('{"queue": "default", "processor": "echo", "items": [NaN]}', "NaN is not valid JSON"),
    ('{"queue": "default", "processor": "echo", "items": [Infinity]}', "Infinity is not valid JSON"),
    ('{"priority": ' + "9" * 5000 + "}", "malformed JSON"),
    ("[" * 100_000, "malformed JSON"),
    (b"\xff\xfe\xfa\x00garbage", "malformed JSON"),
    (b"{\"queue\": \"\xc3\x28\"}", "malformed JSON"),
])
def test_malformed_bodies(engine, api, raw, message):
    response = api.call("POST", "/api/requests", raw=raw)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_too_many_items(engine, api, settings):
    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "API_MAX_ITEMS": 3}
    response = submit(api, items=list(range(4)))
    assert response.status_code == 400 and "too many items: 4 (at most 3" in response.json()["error"]
    assert submit(api, items=list(range(3))).status_code == 201


def test_body_too_large(engine, api, settings):
    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "API_MAX_BODY_BYTES": 1000}
    response = submit(api, items=["x" * 2000])
    assert response.status_code == 413 and "body too large" in response.json()["error"]
    assert response.json()["code"] == "body_too_large"
    small = api.post(f"/api/requests/{'0' * 17}/priority", {"priority": 5, "pad": "x" * 20_000})
    assert small.status_code == 413


@pytest.mark.parametrize("method, url, allowed", [
    ("GET", "/api/requests", "POST"),
    ("PUT", "/api/requests", "POST"),
    ("DELETE", "/api/requests/abc", "GET"),
    ("POST", "/api/requests/abc", "GET"),
    ("GET", "/api/requests/abc/cancel", "POST"),
    ("GET", "/api/requests/abc/priority", "POST"),
    ("POST", "/api/requests/abc/results", "GET"),
    ("POST", "/api/queues", "GET"),
])
def test_wrong_method_is_405_json(engine, api, method, url, allowed):
    response = api.call(method, url)
    assert response.status_code == 405
    assert response["Allow"] == allowed and "not allowed" in response.json()["error"]


def test_unknown_api_path_is_json_404(engine, api):
    for url in ("/api/", "/api/nothing", "/api/requests/a/b/c", "/api"):
        response = api.get(url)
        assert response.status_code == 404 and "no API endpoint" in response.json()["error"], url


def garbage(rng: random.Random):
    """Random JSON-ish values and raw bytes, biased towards our field names."""
    leaves = [None, True, False, 0, -1, 99, 100, 1.5, 10**30, "", "default", "echo", "x" * 300, [], {}]
    fields = ["queue", "processor", "items", "priority", "concurrency", "delay_seconds", "expires_in_seconds",
              "dedup_key", "dedup", "junk"]

    def value(depth=0):
        roll = rng.random()
        if depth > 2 or roll < 0.5:
            return rng.choice(leaves)
        if roll < 0.75:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(fields): value(depth + 1) for _ in range(rng.randint(0, 4))}

    if rng.random() < 0.15:  # nearly valid
        return json.dumps({**BASE, "items": [value()], "dedup": False, "priority": rng.choice([0, 99, 100, None])})
    if rng.random() < 0.2:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
    body = {f: value() for f in rng.sample(fields, rng.randint(0, len(fields)))}
    if rng.random() < 0.5:
        body.update(queue="default", processor="echo")
    return json.dumps(body)


def test_garbage_never_gives_a_500(engine, api):
    rid = submit(api).json()["id"]
    rng = random.Random(1234)
    urls = ["/api/requests", f"/api/requests/{rid}/priority", f"/api/requests/{rid}/concurrency",
            f"/api/requests/{rid}/cancel", f"/api/requests/{rid}", f"/api/requests/{rid}/results", "/api/queues"]
    seen = set()
    for _ in range(300):
        method = rng.choice(["POST", "POST", "GET", "PUT", "PATCH"])
        url = rng.choice(urls)
        response = api.call(method, url, raw=garbage(rng))
        assert response.status_code < 500, (method, url, response.content)
        if not response.streaming:
            assert "application/json" in response["Content-Type"]
        seen.add(response.status_code)
    assert {200, 201, 400, 405} <= seen, seen


# -- auth and roles ---------------------------------------------------------------


ENDPOINTS = [("POST", "/api/requests"), ("GET", "/api/requests/abc"), ("GET", "/api/requests/abc/results"),
             ("POST", "/api/requests/abc/cancel"), ("POST", "/api/requests/abc/priority"), ("GET", "/api/queues")]


@pytest.mark.parametrize("header", [None, "Bearer qa_wrong", "Bearer ", "Basic dXNlcjpwdw==", "qa_xyz",
                                    "Bearer " + "x" * 5000], ids=["none", "wrong", "empty", "basic", "bare",
                                                                  "huge"])
def test_missing_or_wrong_token_is_401(engine, key, header):
    headers = {} if header is None else {"Authorization": header}
    for method, url in ENDPOINTS:
        response = Api(None).call(method, url, BASE, **headers)
        assert response.status_code == 401, url
        assert "token" in response.json()["error"] and response["WWW-Authenticate"].startswith("Bearer")


def test_session_login_is_not_enough(engine, client):
    make_user("admin", superuser=True)
    client.login(username="admin", password="pw")
    assert client.get("/api/queues").status_code == 401


def test_inactive_users_token_is_refused(engine):
    user = make_user("gone", act=True)
    _, key = ApiToken.issue(user)
    assert Api(key).get("/api/queues").status_code == 200
    user.is_active = False
    user.save()
    assert Api(key).get("/api/queues").status_code == 401


def test_deleted_token_is_refused(engine, key):
    assert Api(key).get("/api/queues").status_code == 200
    ApiToken.objects.all().delete()
    assert Api(key).get("/api/queues").status_code == 401


def test_use_is_recorded(engine, api):
    token = ApiToken.objects.get()
    assert token.last_used_at is None
    api.get("/api/queues")
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_view_only_staff_may_read_but_not_act(engine, api, viewer_key):
    rid = submit(api).json()["id"]
    viewer = Api(viewer_key)
    assert viewer.get(f"/api/requests/{rid}").status_code == 200
    assert viewer.get(f"/api/requests/{rid}/results").status_code == 200
    assert viewer.get("/api/queues").status_code == 200
    for url, body in (("/api/requests", BASE), (f"/api/requests/{rid}/cancel", None),
                      (f"/api/requests/{rid}/priority", {"priority": 1}),
                      (f"/api/requests/{rid}/concurrency", {"concurrency": 1})):
        response = viewer.post(url, body)
        assert response.status_code == 403 and "may view but not act" in response.json()["error"], url
    assert engine.status(rid)["state"] == "queued" and engine.status(rid)["priority"] == 50


def test_superuser_may_act_without_explicit_permission(engine):
    _, key = ApiToken.issue(make_user("root", superuser=True))
    assert submit(Api(key)).status_code == 201


# -- backend down ------------------------------------------------------------------


def test_redis_down_is_503(engine, api, settings):
    rid = submit(api).json()["id"]
    settings.REDIS_URL = f"redis://127.0.0.1:{embedded.free_port()}/0"  # nothing listens there
    services.reset()
    calls = [("POST", "/api/requests", BASE), ("GET", f"/api/requests/{rid}", None),
             ("GET", f"/api/requests/{rid}/results", None), ("POST", f"/api/requests/{rid}/cancel", None),
             ("POST", f"/api/requests/{rid}/priority", {"priority": 3}), ("GET", "/api/queues", None)]
    for method, url, body in calls:
        response = api.call(method, url, body)
        assert response.status_code == 503, url
        assert response.json() == {"error": "queue backend unavailable", "code": "backend_unavailable"}


# -- through ASGI, as daphne serves it ------------------------------------------------


def test_submit_and_results_through_asgi(engine, key, settings):
    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "API_MAX_BODY_BYTES": 1000}
    headers = {"Authorization": f"Bearer {key}"}

    async def scenario():
        client = AsyncClient()
        response = await client.post("/api/requests", {**BASE, "items": ["x", "y"]},
                                     content_type="application/json", headers=headers)
        assert response.status_code == 201
        rid = response.json()["id"]
        results = await client.get(f"/api/requests/{rid}/results", headers=headers)
        assert results["Content-Type"] == "application/x-ndjson"
        lines = b"".join([chunk async for chunk in results.streaming_content]).splitlines()  # async: not buffered
        assert [json.loads(x)["index"] for x in lines] == [0, 1]
        too_big = await client.post("/api/requests", {**BASE, "items": ["x" * 2000]},
                                    content_type="application/json", headers=headers)
        assert too_big.status_code == 413

    async_to_sync(scenario)()
