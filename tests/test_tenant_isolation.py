"""One user's submissions cannot capture, suppress or read another's (issue
20, DESIGN.md semantics 14): de-duplication is scoped by owner (API tokens
and the dashboard of one user share a scope; other users, internal callers
and periodic fires each have their own); a duplicate's answer and a steer
answer show a status only to a token that may read; periodic fires cannot be
squatted and their request ids cannot be computed in advance; periodic
requests are bounded and "run now" is a submission. Real redis-server, test
database, real worker processes for the periodic fire."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from queueadmin.core import operations
from queueadmin.core import services
from queueadmin.core.engine.features import periodic
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features.periodic import Definition
from queueadmin.core.models import ApiToken, PeriodicRequest
from tests.api_helpers import Api, make_user
from tests.engine_helpers import wait_for
from tests.test_periodic import periodic_requests

pytestmark = pytest.mark.django_db

SUBMIT = "/api/v1/requests"


def api_of(user, scopes=("read", "submit", "steer")) -> Api:
    return Api(ApiToken.issue(user, "tests", scopes=scopes)[1])


def body(**extra):
    return {"queue": "default", "processor": "echo", "items": ["same"], "delay_seconds": 3600, **extra}


# -- de-duplication is scoped by owner ------------------------------------------------------


def test_two_users_with_the_same_key_get_two_requests(eng):
    alice, bob = make_user("alice", act=True), make_user("bob", act=True)
    a, b = api_of(alice), api_of(bob)
    first = a.post(SUBMIT, body(dedup_key="k", items=["a"]))
    assert first.status_code == 201, first.content
    squat = b.post(SUBMIT, body(dedup_key="k", items=["b"]))  # bob's key cannot capture alice's submission
    assert squat.status_code == 201 and squat.json()["id"] != first.json()["id"]
    assert not squat.json()["duplicate"]
    # and the default key (a hash of processor and items) is scoped too
    x, y = a.post(SUBMIT, body()), b.post(SUBMIT, body())
    assert (x.status_code, y.status_code) == (201, 201) and x.json()["id"] != y.json()["id"]
    # within one owner, a duplicate is the existing request, shown with its key as given
    again = a.post(SUBMIT, body(dedup_key="k", items=["other items"]))
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"] and again.json()["duplicate"]
    assert again.json()["dedup_key"] == "k" and eng.status(first.json()["id"])["dedup_key"] == "k"


def test_one_owner_shares_a_scope_across_tokens_and_the_dashboard(eng):
    carol = make_user("carol", act=True)
    one, two = api_of(carol), api_of(carol)
    rid = one.post(SUBMIT, body(dedup_key="nightly")).json()["id"]
    assert two.post(SUBMIT, body(dedup_key="nightly")).json()["id"] == rid
    dashboard = Client()
    dashboard.force_login(carol)
    response = dashboard.post(reverse("queueadmin:submit"), {"queue": "default", "processor": "echo",
                                                             "items": "other", "dedup_key": "nightly"})
    assert response.status_code == 302 and response["Location"].rstrip("/").endswith(rid)
    # internal callers (Python API, commands, Django Tasks) have a scope of their own
    assert eng.submit("default", "echo", ["same"], dedup_key="nightly", delay=3600).id != rid
    with pytest.raises(QueueError, match="kept for periodic requests"):
        eng.submit("default", "echo", ["x"], dedup_key="periodic:p:1", dedup_scope="periodic")


def test_a_duplicate_answer_shows_a_status_only_to_a_token_that_may_read(eng):
    dave = make_user("dave", act=True)
    reader = api_of(dave)
    secret_url = "https://hooks.example.com/in?secret=s3cr3t"
    first = reader.post(SUBMIT, body(dedup_key="job"))
    eng.redis.hset(eng.keys.request(first.json()["id"]).meta, "callback_url", secret_url)  # as if it had one
    submit_only = api_of(dave, scopes=("submit",))
    dup = submit_only.post(SUBMIT, body(dedup_key="job"))
    assert dup.status_code == 200 and dup.json()["duplicate"] and dup.json()["id"] == first.json()["id"]
    assert b"s3cr3t" not in dup.content and dup.json()["callback_url"] is None and dup.json()["queue"] is None
    full = reader.post(SUBMIT, body(dedup_key="job"))
    assert full.json()["callback_url"] == secret_url  # the same owner's token with read sees it


def test_steer_answers_show_the_status_only_with_the_read_scope(eng):
    erin = make_user("erin", act=True)
    rid = api_of(erin).post(SUBMIT, body()).json()["id"]
    eng.redis.hset(eng.keys.request(rid).meta, "callback_url", "https://hooks.example.com/?secret=s3cr3t")
    steer = api_of(erin, scopes=("steer",))
    answer = steer.post(f"{SUBMIT}/{rid}/priority", {"priority": 80})
    assert answer.status_code == 200 and answer.json()["priority"] == 80 and answer.json()["id"] == rid
    assert b"s3cr3t" not in answer.content and answer.json()["processor"] is None
    answer = steer.post(f"{SUBMIT}/{rid}/cancel")
    assert answer.status_code == 200 and answer.json()["state"] == "cancelled" and b"s3cr3t" not in answer.content
    assert api_of(erin, scopes=("read",)).get(f"{SUBMIT}/{rid}").json()["callback_url"].endswith("s3cr3t")


# -- periodic fires cannot be squatted ------------------------------------------------------


def test_a_squatting_submission_does_not_suppress_a_periodic_fire(eng):
    """Someone with the submit scope submits first with the fire's documented
    de-dup key (any processor, a ten-year delay): the fire still happens."""
    d = Definition(name="nightly", queue="default", processor="echo", items=["report"], interval=3600)
    due = (periodic.server_ms(eng) // 3_600_000 + 1) * 3_600_000
    mallory = api_of(make_user("mallory", act=True))
    key = periodic.dedup_key(d.name, due)
    squat = mallory.post(SUBMIT, body(dedup_key=key, delay_seconds=10 * 365 * 86400 - 1))
    assert squat.status_code == 201
    eng.submit("default", "echo", ["x"], dedup_key=key, delay=3600)  # nor can an internal caller
    rid = periodic.fire(eng, d, due)
    assert rid != squat.json()["id"] and eng.status(rid)["periodic"] == "nightly"
    assert eng.status(rid)["dedup_key"] == key and eng.status(rid)["dedup_scope"] == "periodic"
    assert periodic.fire(eng, d, due) == rid  # and a second fire of that due time is still the same request


@pytest.mark.slow
def test_the_fire_after_a_squatting_attempt_runs_on_a_real_worker(eng, workers):
    name = "squatted"
    periodic.define(eng, Definition(name=name, queue="default", processor="echo", items=["tick"], interval=2))
    nxt = periodic.next_runs(eng, [name])[name]
    mallory = api_of(make_user("mallory", act=True))
    for due in (nxt, nxt + 2000):  # the next two due times, as documented
        assert mallory.post(SUBMIT, body(dedup_key=periodic.dedup_key(name, due), processor="uppercase",
                                         delay_seconds=10 * 365 * 86400 - 1)).status_code == 201
    workers.start("default", 1, False, "fires")
    wait_for(lambda: periodic.last_runs(eng, [name]).get(name, {}).get("due", 0) >= nxt + 2000, 30,
             message="both due times fired")
    fired = periodic_requests(eng, name)
    assert {int(m["due_at"]) for m in fired} >= {nxt, nxt + 2000}
    assert all(m["processor"] == "echo" for m in fired)  # the schedule's own requests, not the squatter's
    periodic.remove(eng, name)


def test_periodic_request_ids_cannot_be_computed_without_the_secret(eng, r):
    d = Definition(name="hourly", queue="default", processor="echo", items=["x"], interval=3600)
    due = (periodic.server_ms(eng) // 3_600_000 + 1) * 3_600_000
    rid = periodic.fire(eng, d, due)
    import hashlib

    old_scheme = f"{due:011x}{hashlib.blake2b(b'hourly', digest_size=10).hexdigest()}"
    assert rid != old_scheme and rid.startswith(f"{due:011x}") and len(rid) == 31
    assert eng.redis.get(eng.keys.periodic.secret)  # the key lives in Redis only


# -- the periodic admin -------------------------------------------------------------------


def test_periodic_items_are_bounded_by_their_period(eng):
    small = Definition(name="p", queue="default", processor="echo", items=["x"] * 10, interval=1)
    small.check()  # 10 tiny items every second: fine
    big = Definition(name="p", queue="default", processor="echo", items=["x" * 2200] * 1000, interval=1)
    with pytest.raises(QueueError, match="at most 1,024 KiB"):
        big.check()
    with pytest.raises(QueueError, match=r"need at least 5 s between fires, and this one fires every 1 s"):
        Definition(name="p", queue="default", processor="echo", items=["y" * 5000], interval=1).check()
    Definition(name="p", queue="default", processor="echo", items=["y" * 5000], interval=5).check()
    with pytest.raises(QueueError, match="fires every 1 s"):  # a cron with seconds fires every second
        Definition(name="p", queue="default", processor="echo", items=["y" * 5000], cron="* * * * * *").check()
    Definition(name="p", queue="default", processor="echo", items=["y" * 5000], cron="* * * * *").check()
    assert Definition(name="p", queue="default", processor="echo", items=["y"], cron="* * * * * 0,30").shortest_period() == 30
    assert Definition(name="p", queue="default", processor="echo", items=["y"], cron="* * * * * 58,59").shortest_period() == 1


def test_the_admin_refuses_a_one_second_schedule_of_megabytes(eng, client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    items = "\n".join(["x" * 2000] * 1100)
    response = client.post(reverse("admin:queueadmin_periodicrequest_add"), {
        "name": "flood", "enabled": "on", "queue": "default", "processor": "echo", "items": items, "cron": "",
        "interval_seconds": 1, "timezone": "UTC", "catch_up": "once", "_save": "Save"})
    assert response.status_code == 200 and "at most 1,024 KiB" in response.content.decode()
    assert not PeriodicRequest.objects.exists() and not eng.redis.hlen(eng.keys.periodic.defs)


def test_run_now_needs_the_submit_permission(eng):
    obj = PeriodicRequest.objects.create(name="nightly", queue_id="default", processor="echo", items="a",
                                         interval_seconds=3600)
    scheduler = make_user("scheduler")  # may edit periodic requests, not submit
    for codename in ("view_periodicrequest", "change_periodicrequest", "add_periodicrequest"):
        scheduler.user_permissions.add(Permission.objects.get(codename=codename))
    scheduler = User.objects.get(pk=scheduler.pk)
    c = Client()
    c.force_login(scheduler)
    changelist = reverse("admin:queueadmin_periodicrequest_changelist")
    page = c.post(changelist, {"action": "run_now", "_selected_action": [obj.pk]}, follow=True)
    assert page.status_code == 200 and "may not submit requests" in page.content.decode()
    assert not eng.live_requests("default")
    with pytest.raises(QueueError, match="may not submit"):
        operations.run_periodic(obj, scheduler)
    with pytest.raises(QueueError):
        operations.run_periodic(obj, None)
    operator = make_user("operator", act=True)
    rid = operations.run_periodic(obj, operator)
    assert eng.status(rid)["periodic"] == "nightly"
