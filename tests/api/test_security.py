"""Who may call what, and how often: token scopes per operation (read,
submit, steer), the per-token rate limit (429 + Retry-After, counted in
Redis), and the newer parts of the API's surface (time_limit, cursor pages)."""
from __future__ import annotations

import pytest

from queueadmin.core import services
from queueadmin.core.models import ApiToken
from tests.api_helpers import BASE, Api, make_user, token_for

pytestmark = [pytest.mark.django_db]


def submit(api, **fields):
    return api.post("/api/v1/requests", {**BASE, "dedup": False, **fields})


# -- scopes ----------------------------------------------------------------------


def test_read_only_token_cannot_submit_or_steer(engine, api):
    rid = submit(api).json()["id"]
    reader = Api(token_for("reader", ["read"]))
    assert reader.get(f"/api/v1/requests/{rid}").status_code == 200
    assert reader.get(f"/api/v1/requests/{rid}/results").status_code == 200
    assert reader.get("/api/v1/queues").status_code == 200
    assert reader.get("/api/v1/requests").status_code == 200
    for url, body in (("/api/v1/requests", BASE), ("/api/requests", BASE), (f"/api/v1/requests/{rid}/cancel", None),
                      (f"/api/v1/requests/{rid}/priority", {"priority": 1})):
        response = reader.post(url, body)
        assert response.status_code == 403, url
        assert response.json()["code"] == "scope" and "lacks the scope" in response.json()["error"], url
    assert engine.status(rid)["state"] == "queued" and engine.status(rid)["priority"] == 50


def test_steering_needs_the_steer_scope(engine, api):
    rid = submit(api).json()["id"]
    submitter = Api(token_for("submitter", ["read", "submit"]))
    assert submit(submitter).status_code == 201
    for suffix, body in (("cancel", None), ("priority", {"priority": 9}), ("concurrency", {"concurrency": 2})):
        response = submitter.post(f"/api/v1/requests/{rid}/{suffix}", body)
        assert (response.status_code, response.json()["code"]) == (403, "scope"), suffix
        assert "'steer'" in response.json()["error"]
    steerer = Api(token_for("steerer", ["steer"]))
    assert steerer.get(f"/api/v1/requests/{rid}").json()["code"] == "scope"  # steer alone does not read
    assert steerer.post(f"/api/v1/requests/{rid}/cancel").json()["state"] == "cancelled"


def test_a_token_is_no_stronger_than_its_user(engine):
    """The token carries submit, its user lost the permission: refused at once."""
    key = token_for("demoted", ["read", "submit"])
    assert submit(Api(key)).status_code == 201
    user = ApiToken.objects.get().user
    user.user_permissions.clear()
    user = type(user).objects.get(pk=user.pk)  # no permission cache
    response = submit(Api(key))
    assert (response.status_code, response.json()["code"]) == (403, "scope")
    assert "may view but not act" in response.json()["error"]


def test_metrics_only_token_reads_nothing_here(engine):
    key = ApiToken.issue(make_user("scraper"), "prometheus", scopes=["metrics"])[1]
    response = Api(key).get("/api/v1/queues")
    assert (response.status_code, response.json()["code"]) == (403, "scope")


def test_revoked_and_expired_tokens_are_401(engine, api):
    from datetime import timedelta

    from django.utils import timezone

    token = ApiToken.objects.get()
    assert api.get("/api/v1/queues").status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = api.get("/api/v1/queues")
    assert (response.status_code, response.json()["code"]) == (401, "unauthorized")
    ApiToken.objects.filter(pk=token.pk).update(expires_at=None, revoked_at=timezone.now())
    assert api.get("/api/v1/queues").status_code == 401


# -- rate limit --------------------------------------------------------------------


def test_rate_limit_is_per_token_and_says_when_to_retry(engine, api, settings, r):
    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "API_RATE_LIMIT": "3/min"}
    for _ in range(3):
        assert api.get("/api/v1/queues").status_code == 200
    refused = api.get("/api/v1/queues")
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "3 calls per 60 s" in refused.json()["error"]
    assert submit(api).status_code == 429  # every operation counts
    other = Api(token_for("other"))
    assert other.get("/api/v1/queues").status_code == 200  # its own budget
    assert len(r.keys("qa:rate:*")) == 2  # counted in Redis, shared by every web process


def test_rate_limit_window_passes(engine, api, settings):
    import time

    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "API_RATE_LIMIT": "2/s"}
    for _ in range(3):  # three calls inside one 1-second window (again if a slow machine straddled two)
        time.sleep(1 - time.time() % 1 + 0.01)  # start of a window
        window = int(time.time())
        codes = [api.get("/api/v1/queues").status_code for _ in range(3)]
        if int(time.time()) == window:
            break
    assert codes == [200, 200, 429]
    time.sleep(1 - time.time() % 1 + 0.01)
    assert api.get("/api/v1/queues").status_code == 200


def test_no_rate_limit_when_off(engine, api, settings):
    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "API_RATE_LIMIT": "0"}
    assert {api.get("/api/v1/queues").status_code for _ in range(20)} == {200}


def test_unauthenticated_calls_are_not_counted(engine, settings, r):
    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "API_RATE_LIMIT": "1/min"}
    assert {Api(None).get("/api/v1/queues").status_code for _ in range(3)} == {401}
    assert r.keys("qa:rate:*") == []


# -- time_limit ----------------------------------------------------------------------


@pytest.mark.parametrize("value, shown", [(30, 30.0), (0, 0.0), (2.5, 2.5), (None, None)])
def test_time_limit_is_passed_to_the_engine_and_shown(engine, api, value, shown):
    fields = {} if value is None else {"time_limit": value}
    response = submit(api, **fields)
    assert response.status_code == 201 and response.json()["time_limit"] == shown
    rid = response.json()["id"]
    assert api.get(f"/api/v1/requests/{rid}").json()["time_limit"] == shown
    meta = engine.redis.hgetall(engine.keys.request(rid).meta)
    assert (float(meta["time_limit"]) if "time_limit" in meta else None) == shown


@pytest.mark.parametrize("value", [-1, "30", True, 10**12, [1]])
def test_bad_time_limit(engine, api, value):
    response = submit(api, time_limit=value)
    assert response.status_code == 400 and response.json()["code"] == "invalid"
    assert "time_limit must be a number of seconds" in response.json()["error"]


# -- cursor pages ----------------------------------------------------------------------


def test_requests_are_listed_newest_first_a_page_at_a_time(engine, api):
    rids = [submit(api, items=[n]).json()["id"] for n in range(5)]
    seen, cursor = [], None
    for _ in range(5):
        url = "/api/v1/requests?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = api.get(url).json()
        seen += [r["id"] for r in page["requests"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == rids[::-1]
    assert api.get("/api/v1/requests?state=queued&queue=default").json()["requests"][0]["archived"] is False
    assert api.get("/api/v1/requests?queue=nope").json() == {"requests": [], "next_cursor": None}


def test_queues_are_paged_by_name(engine, api):
    from queueadmin.core.models import Queue

    for name in ("alpha", "beta"):
        Queue.objects.create(name=name)
    first = api.get("/api/v1/queues?limit=2").json()
    assert [q["name"] for q in first["queues"]] == ["alpha", "beta"] and first["next_cursor"]
    rest = api.get(f"/api/v1/queues?limit=2&cursor={first['next_cursor']}").json()
    assert [q["name"] for q in rest["queues"]] == ["default"] and rest["next_cursor"] is None


@pytest.mark.parametrize("query, message", [("limit=0", "limit must be an integer between 1 and 500"),
                                            ("limit=501", "limit must be"), ("limit=x", "limit must be"),
                                            ("cursor=%25%25%25", "cursor must be")])
def test_bad_page_parameters(engine, api, query, message):
    for url in ("/api/v1/requests", "/api/v1/queues"):
        response = api.get(f"{url}?{query}")
        assert response.status_code == 400 and message in response.json()["error"], url


# -- Redis trouble ----------------------------------------------------------------------


def test_redis_out_of_memory_is_a_clear_503_and_reads_go_on(engine, api, r):
    rid = submit(api).json()["id"]
    policy = r.config_get("maxmemory-policy")["maxmemory-policy"]
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)  # every write is refused with OOM from now on
    try:
        refused = submit(api)
        assert refused.status_code == 503 and refused.json()["code"] == "backend_out_of_memory"
        assert "out of memory" in refused.json()["error"] and "script" not in refused.json()["error"]
        steer = api.post(f"/api/v1/requests/{rid}/priority", {"priority": 3})
        assert steer.status_code == 503 and steer.json()["code"] == "backend_out_of_memory"
        status = api.get(f"/api/v1/requests/{rid}")  # reading needs no memory (the rate limit counts nothing)
        assert status.status_code == 200 and status.json()["priority"] == 50
    finally:
        r.config_set("maxmemory", 0)
        r.config_set("maxmemory-policy", policy)
    assert submit(api).status_code == 201
