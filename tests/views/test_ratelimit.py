"""Rate limits from every entry point (issue 12, part 2): the admin's queue
setting, the API field, the form, `queue_submit --rate-limit`, and the
dashboard showing throttled queues and requests with their current rate."""
import pytest
from django.core.management import CommandError, call_command
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from queueadmin.core import services
from queueadmin.core.engine.features import ratelimit
from queueadmin.core.models import ApiToken, Queue
from tests.api_helpers import Api, make_user
from tests.engine.features.test_ratelimit import claim

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]
BODY = {"queue": "default", "processor": "uppercase", "items": ["a", "b", "c"], "concurrency": 3}


@pytest.fixture
def api(redis_url):
    return Api(ApiToken.issue(make_user("rater", act=True), "t")[1])


def test_the_api_takes_a_rate_limit_and_returns_it_canonical(api):
    resp = api.post("/api/v1/requests", {**BODY, "rate_limit": " 600 / MIN "})
    assert resp.status_code == 201, resp.content
    assert resp.json()["rate_limit"] == "600/min"
    assert api.get(f"/api/v1/requests/{resp.json()['id']}").json()["rate_limit"] == "600/min"
    unlimited = api.post("/api/v1/requests", {**BODY, "items": ["z"]}).json()
    assert unlimited["rate_limit"] is None


@pytest.mark.parametrize("bad, says", [("fast", "rate limit 'fast'"), ("0/s", "between 1 and"),
                                       (20, "rate_limit must be a string"), ("9/ms", "count per unit"),
                                       ("1" * 40 + "/s", "at most 32 characters")])
def test_the_api_refuses_a_bad_rate_limit_with_a_reason(api, bad, says):
    resp = api.post("/api/v1/requests", {**BODY, "rate_limit": bad})
    assert resp.status_code == 400, resp.content
    assert says in resp.json()["error"]


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(max_size=40), st.from_regex(r"\d{1,6}/\d{0,2}(s|min|h|d|sec|hours)", fullmatch=True)))
def test_any_rate_limit_text_gives_201_or_400_and_round_trips(api, text):
    resp = api.post("/api/v1/requests", {**BODY, "items": [text], "rate_limit": text, "dedup": False})
    assert resp.status_code in (201, 400), resp.content
    if resp.status_code == 201:
        expected = ratelimit.canonical(text) or None
        assert resp.json()["rate_limit"] == expected
    else:
        assert "rate_limit" in resp.json()["error"] or "rate limit" in resp.json()["error"]


def test_the_form_takes_a_rate_limit_and_shows_a_bad_one(redis_url, admin_client):
    resp = admin_client.post("/submit/", {"queue": "default", "processor": "uppercase", "items": "a\nb",
                                          "rate_limit": "2/hours"})
    assert resp.status_code == 302, resp.content[:300]
    rid = resp.url.rstrip("/").rsplit("/", 1)[-1]
    assert services.engine().status(rid)["rate_limit"] == "2/h"
    page = admin_client.get(resp.url).content.decode()
    assert "Rate limit" in page and "2/h" in page
    resp = admin_client.post("/submit/", {"queue": "default", "processor": "uppercase", "items": "c",
                                          "rate_limit": "lots"})
    assert resp.status_code == 200 and "count per unit" in resp.content.decode()


def test_queue_submit_takes_a_rate_limit(redis_url, tmp_path, capsys):
    path = tmp_path / "items.txt"
    path.write_text("a\nb\n")
    call_command("queue_submit", str(path), "--processor", "uppercase", "--rate-limit", "5/10s", verbosity=0)
    rid = capsys.readouterr().out.strip()
    assert services.engine().status(rid)["rate_limit"] == "5/10s"
    with pytest.raises(CommandError, match="rate limit 'often'"):
        call_command("queue_submit", str(path), "--processor", "uppercase", "--rate-limit", "often")


def test_the_admin_sets_a_queue_limit_that_workers_read_and_pages_show(redis_url, admin_client):
    from django.contrib import admin

    resp = admin_client.post("/admin/queueadmin/queue/add/", {
        "name": "slowq", "priority": 50, "concurrency": 10, "lease_seconds": 60, "max_attempts": 3,
        "backoff_seconds": 1, "backoff_max_seconds": 300, "retention_seconds": 86400, "time_limit_seconds": 3600,
        "unrunnable_seconds": 3600,
        "rate_limit": "3 / Sec"})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    assert Queue.objects.get(name="slowq").rate_limit == "3/s"
    eng = services.engine()
    assert eng.queue_config("slowq").rate_limit == "3/s"
    resp = admin_client.post("/admin/queueadmin/queue/add/", {
        "name": "badq", "priority": 50, "concurrency": 10, "lease_seconds": 60, "max_attempts": 3,
        "backoff_seconds": 1, "backoff_max_seconds": 300, "retention_seconds": 86400, "time_limit_seconds": 3600,
        "unrunnable_seconds": 3600,
        "rate_limit": "3 per sec"})
    assert resp.status_code == 200 and "count per unit" in resp.content.decode()
    assert admin  # the admin site is the one the URLs serve

    Queue.objects.get(name="default").save()  # pushed to Redis, as the admin does
    eng.submit("slowq", "uppercase", list("abcdef"), concurrency=6)
    own = eng.submit("default", "uppercase", list("ghij"), concurrency=4, rate_limit="1/min")
    assert len(claim(eng, "slowq", 6)[1]) == 3  # a worker takes what the limit allows
    assert len(claim(eng, "default", 4)[1]) == 1
    queues = admin_client.get("/queues/").content.decode()
    assert "throttled · 3 of 3/s" in queues and "1 request with a limit, 1 throttled" in queues
    assert "throttled · 3 of 3/s" in admin_client.get("/").content.decode()
    page = admin_client.get(f"/requests/{own.id}/").content.decode()
    assert "throttled · 1 of 1/min" in page
