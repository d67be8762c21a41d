"""Periodic requests end to end: the admin (validation, publishing to Redis,
run now / pause / resume, any input), the Scheduled page, and real worker
processes firing each due time exactly once, with both downtime policies."""
from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from queueadmin.core import operations
from queueadmin.core import periodic as periodic_web
from queueadmin.core import services
from queueadmin.core.engine.features import periodic
from queueadmin.core.engine.features.periodic import Definition
from queueadmin.core.models import PeriodicRequest
from tests.engine_helpers import wait_for
from tests.test_inputs_property import form_json_lines, form_lines, http_text

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]


@pytest.fixture
def admin_client(client, engine):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def form(**changes):
    data = {"name": "nightly", "enabled": "on", "queue": "default", "processor": "echo", "items": "a\nb",
            "cron": "", "interval_seconds": 60, "timezone": "UTC", "catch_up": "once", "_save": "Save"}
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def make(name="nightly", **fields) -> PeriodicRequest:
    values = {"queue_id": "default", "processor": "echo", "items": "a\nb", "interval_seconds": 60, **fields}
    return PeriodicRequest.objects.create(name=name, **values)


def published(engine, name) -> Definition | None:
    raw = engine.redis.hget(engine.keys.periodic.defs, name)
    return Definition.from_json(raw) if raw else None


def periodic_requests(engine, name) -> list[dict]:
    """Every request any process made for a schedule (finished ones too), by due time."""
    out = []
    for key in engine.redis.scan_iter(match=f"{engine.keys.prefix}:{{r:*}}:meta", count=1000):
        meta = engine.redis.hgetall(key)
        if meta.get("periodic") == name:
            out.append(meta)
    return sorted(out, key=lambda m: (int(m["due_at"]), m["id"]))


# -- the admin -------------------------------------------------------------------


def test_a_periodic_request_added_in_the_admin_is_published(admin_client, engine):
    response = admin_client.post(reverse("admin:queueadmin_periodicrequest_add"),
                                 form(items='{"n": 1}\n[2]\n"three"', items_are_json="on", cron="0 3 * * *",
                                      interval_seconds="", timezone="Europe/Berlin", priority=80))
    assert response.status_code == 302, response.content
    d = published(engine, "nightly")
    assert (d.items, d.cron, d.tz, d.priority) == ([{"n": 1}, [2], "three"], "0 3 * * *", "Europe/Berlin", 80)
    nxt = periodic.next_runs(engine, ["nightly"])["nightly"]
    assert nxt == d.next_after(periodic.server_ms(engine))  # 03:00 in Berlin, as workers will see it


@pytest.mark.parametrize("changes, field, message", [
    ({"cron": "61 * * * *", "interval_seconds": ""}, "cron", "Not a valid cron expression"),
    ({"cron": "0 0 30 2 *", "interval_seconds": ""}, "cron", "never comes due"),
    ({"timezone": "Mars/Olympus"}, "timezone", "Unknown time zone"),
    ({"processor": "no_such_processor"}, "processor", "Unknown processor"),
    ({"queue": "nowhere"}, "queue", "Select a valid choice"),
    ({"items": '{"ok": 1}\n{bad', "items_are_json": "on"}, "items", "line 2 is not JSON"),
    ({"items": "\n \n"}, "items", ""),
    ({"cron": "* * * * *"}, None, "exactly one"),
    ({"interval_seconds": ""}, None, "exactly one"),
    ({"interval_seconds": 0}, "interval_seconds", "greater than or equal to 1"),
    ({"name": "bad name!"}, "name", "letters, digits"),
])
def test_the_admin_refuses_bad_definitions_with_a_clear_error(admin_client, engine, changes, field, message):
    response = admin_client.post(reverse("admin:queueadmin_periodicrequest_add"), form(**changes))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors if field else "__all__" in errors, errors
    assert message in " ".join(sum(errors.values(), [])), errors
    assert not PeriodicRequest.objects.exists() and published(engine, "nightly") is None


def test_edits_pause_resume_and_delete_reach_redis(admin_client, engine):
    obj = make(interval_seconds=3600)
    first = periodic.next_runs(engine, ["nightly"])["nightly"]
    url = reverse("admin:queueadmin_periodicrequest_change", args=[obj.pk])
    assert admin_client.post(url, form(items="x\ny\nz", interval_seconds=3600)).status_code == 302
    assert published(engine, "nightly").items == ["x", "y", "z"]  # workers read this on their next tick
    assert periodic.next_runs(engine, ["nightly"])["nightly"] == first  # same timing: same due time
    changelist = reverse("admin:queueadmin_periodicrequest_changelist")
    admin_client.post(changelist, {"action": "pause", "_selected_action": [obj.pk]})
    assert published(engine, "nightly") is None and periodic.next_runs(engine, ["nightly"])["nightly"] is None
    admin_client.post(changelist, {"action": "resume", "_selected_action": [obj.pk]})
    assert periodic.next_runs(engine, ["nightly"])["nightly"] == first
    response = admin_client.post(changelist, {"action": "run_now", "_selected_action": [obj.pk]}, follow=True)
    (rid,) = [m["id"] for m in periodic_requests(engine, "nightly")]
    assert rid in response.content.decode()
    assert PeriodicRequest.objects.get().last_request_id == rid
    admin_client.post(reverse("admin:queueadmin_periodicrequest_delete", args=[obj.pk]), {"post": "yes"})
    assert published(engine, "nightly") is None and not engine.redis.zcard(engine.keys.periodic.due)


def test_redis_is_brought_in_step_with_the_database(engine):
    make("kept")
    make("paused", enabled=False)
    engine.redis.delete(engine.keys.periodic.defs, engine.keys.periodic.due)  # e.g. Redis was flushed
    periodic.define(engine, Definition(name="gone", queue="default", processor="echo", items=["x"], interval=5))
    periodic_web.mirror()
    assert published(engine, "kept") and not published(engine, "paused") and not published(engine, "gone")
    assert PeriodicRequest.objects.get(name="kept").next_run_at is not None


def test_after_the_commit_redis_matches_the_row_again(engine, django_capture_on_commit_callbacks):
    # a `mirror` running while the save's transaction was open did not see the new row: it removed the
    # schedule as a stray; the commit publishes it again
    with django_capture_on_commit_callbacks() as callbacks:
        obj = make()
    periodic.remove(engine, "nightly")
    for callback in callbacks:
        callback()
    assert published(engine, "nightly") is not None
    # ... and the other way round: a deleted row a stale `mirror` published again
    with django_capture_on_commit_callbacks() as callbacks:
        obj.delete()
    periodic.define(engine, Definition(name="nightly", queue="default", processor="echo", items=["a"], interval=60))
    for callback in callbacks:
        callback()
    assert published(engine, "nightly") is None


# -- the Scheduled page ----------------------------------------------------------


def test_the_scheduled_page_lists_them_and_run_now_submits(admin_client, engine):
    make(interval_seconds=3600)
    make("paused", enabled=False, cron="*/5 * * * *", interval_seconds=None)
    page = admin_client.get(reverse("queueadmin:scheduled")).content.decode()
    assert "nightly" in page and "every 3,600 s" in page and "cron */5 * * * *" in page and ">paused<" in page
    response = admin_client.post(reverse("queueadmin:scheduled_action"), {"action": "periodic_run", "periodic": "nightly"},
                                 follow=True)
    (meta,) = periodic_requests(engine, "nightly")
    html = response.content.decode()
    assert f"submitted request {meta['id']}" in html
    assert reverse("queueadmin:request_detail", args=[meta["id"]]) in html  # the last request, linked
    assert engine.status(meta["id"])["total"] == 2
    # htmx: pause and resume answer with the page's fragment
    admin_client.post(reverse("queueadmin:scheduled_action"), {"action": "periodic_pause", "periodic": "nightly"},
                      headers={"HX-Request": "true"})
    assert PeriodicRequest.objects.get(name="nightly").enabled is False and published(engine, "nightly") is None
    admin_client.post(reverse("queueadmin:scheduled_action"), {"action": "periodic_resume", "periodic": "paused"})
    assert published(engine, "paused").cron == "*/5 * * * *"
    fragment = admin_client.get(reverse("queueadmin:scheduled"), headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in fragment and 'id="periodic-table"' in fragment


def test_the_live_fragment_shows_next_runs(engine):
    from queueadmin.core.live.render import render_topic

    make(interval_seconds=60)
    html = render_topic("scheduled:1", can_act=False)
    assert "nightly" in html and "every 60 s" in html and "Run now" not in html  # view-only: no buttons
    assert "Run now" in render_topic("scheduled:1", can_act=True)


def test_only_staff_who_may_act_change_them_and_only_with_csrf(engine):
    make()
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    c = Client()
    c.force_login(viewer)
    assert "nightly" in c.get(reverse("queueadmin:scheduled")).content.decode()
    assert c.post(reverse("queueadmin:scheduled_action"), {"action": "periodic_run", "periodic": "nightly"}).status_code == 403
    operator = User.objects.create_user("operator", password="pw", is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="change_requestrecord"))
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    assert strict.post(reverse("queueadmin:scheduled_action"),
                       {"action": "periodic_pause", "periodic": "nightly"}).status_code == 403  # no CSRF token
    assert PeriodicRequest.objects.get().enabled and not periodic_requests(engine, "nightly")
    c.force_login(operator)
    assert c.post(reverse("queueadmin:scheduled_action"), {"action": "periodic_run", "periodic": "nope"}).status_code == 404


# -- real workers ----------------------------------------------------------------


def _check_consecutive(engine, metas, name):
    dues = [int(m["due_at"]) for m in metas]
    assert len(dues) == len(set(dues)), f"a due time fired twice: {dues}"
    assert all(b - a == 1000 for a, b in zip(dues, dues[1:])), f"gaps: {dues}"
    for m in metas:  # ids and de-dup keys name the schedule and the due time (the key in the periodic scope)
        assert m["id"] == periodic.request_id(engine, name, int(m["due_at"]))
        assert m["dedup_key"] == f"periodic\x1fperiodic:{name}:{int(m['due_at']) // 1000}"
    return dues


@pytest.mark.slow
def test_three_workers_fire_each_second_exactly_once(engine, workers):
    periodic.define(engine, Definition(name="every-second", queue="default", processor="echo", items=["x"],
                                       interval=1))
    for n in range(3):
        workers.start("default", 1, False, f"w{n}")
    wait_for(lambda: periodic_requests(engine, "every-second"), 20, message="a first request")
    time.sleep(7)
    periodic.remove(engine, "every-second")
    time.sleep(0.3)  # a fire in progress when it was removed
    metas = periodic_requests(engine, "every-second")
    dues = _check_consecutive(engine, metas, "every-second")
    assert len(dues) >= 6, dues
    live = [w for w in engine.redis.zrange(engine.keys.workers, 0, -1)]
    assert len(live) >= 3, workers.logs()  # three workers really competed
    wait_for(lambda: all(engine.status(m["id"])["state"] == "completed" for m in metas), 10,
             message="every request ran")


@pytest.mark.slow
def test_after_downtime_once_fires_one_request_and_skip_none(engine, workers):
    defined = periodic.server_ms(engine)
    for policy in ("once", "skip"):
        periodic.define(engine, Definition(name=policy, queue="default", processor="echo", items=["x"], interval=1,
                                           catch_up=policy))
    time.sleep(3.5)  # no worker runs: three or four due times pass
    started = periodic.server_ms(engine)
    workers.start("default", 1, False, "late")
    wait_for(lambda: all(len([m for m in periodic_requests(engine, p) if int(m["due_at"]) > started]) >= 2
                         for p in ("once", "skip")), 20, message="both schedules running again")
    for policy in ("once", "skip"):
        periodic.remove(engine, policy)
    time.sleep(0.3)

    once = periodic_requests(engine, "once")
    caught = [m for m in once if m.get("caught_up")]
    assert len(caught) == 1, once  # one request for all the missed times ...
    missed_due = int(caught[0]["due_at"])
    assert [m for m in once if int(m["due_at"]) <= missed_due] == caught  # ... and none for the earlier ones
    assert missed_due - (defined // 1000 + 1) * 1000 >= 1000  # it stands for two or more missed times
    _check_consecutive(engine, once, "once")  # then every second again

    skip = periodic_requests(engine, "skip")
    assert not [m for m in skip if m.get("caught_up")]
    assert min(int(m["due_at"]) for m in skip) > started - 1000, skip  # nothing for the missed times
    _check_consecutive(engine, skip, "skip")
    assert len(skip) >= 2


# -- whatever the admin form is sent ------------------------------------------------

FUZZ = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
good = {"cron": st.sampled_from(["0 3 * * 1-5", "*/10 * * * * *", "@hourly", "5 4 * * sun"]),
        "timezone": st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Etc/GMT+5", "Asia/Kolkata"]),
        "name": st.sampled_from(["p", "nightly.report", "a-b_c"]), "items": http_text}


@FUZZ
@given(fuzzed=st.sampled_from(["", "name", "cron", "timezone", "items", "interval_seconds"]), junk=http_text,
       values=st.fixed_dictionaries(good), json_items=form_json_lines, as_json=st.booleans(),
       use_cron=st.booleans(), interval=st.integers(-5, 10**10))
def test_the_admin_form_never_fails_and_round_trips(admin_client, engine, fuzzed, junk, values, json_items,
                                                    as_json, use_cron, interval):
    """One field at a time gets any text; the rest are valid. Never a 5xx; a
    refusal names its field; what is accepted is published as typed."""
    values = {**values, "items": json_items if as_json else values["items"],
              "interval_seconds": "" if use_cron else str(interval), "cron": values["cron"] if use_cron else ""}
    if fuzzed:
        values[fuzzed] = junk
    response = admin_client.post(reverse("admin:queueadmin_periodicrequest_add"),
                                 form(**values, items_are_json="on" if as_json else None))
    assert response.status_code in (200, 302), response.status_code
    event("accepted" if response.status_code == 302 else "refused")
    if response.status_code == 200:
        assert response.context["adminform"].form.errors
        return
    obj = PeriodicRequest.objects.get()
    try:
        d = published(engine, obj.name)
        lines = form_lines(values["items"])
        assert d.items == ([json.loads(line) for line in lines] if as_json else lines)
        assert (d.cron, d.interval, d.tz) == (" ".join(values["cron"].split()), int(values["interval_seconds"] or 0),
                                              values["timezone"].strip())
        assert periodic.next_runs(engine, [obj.name])[obj.name] is not None
    finally:
        obj.delete()


@pytest.mark.slow
def test_changes_in_the_admin_reach_running_workers_within_seconds(engine, workers):
    obj = make("live-edit", interval_seconds=1, items="v1")
    workers.start("default", 1, False, "edit")
    wait_for(lambda: periodic_requests(engine, "live-edit"), 20, message="a first request")

    def items_of(meta):
        return [i["payload"] for i in engine.items(meta["id"], count=10)]

    obj.items = "v2"
    obj.save()  # what the admin's save does
    changed = time.time()
    wait_for(lambda: any(items_of(m) == ["v2"] for m in periodic_requests(engine, "live-edit")), 3,
             message="a request with the new items")
    assert time.time() - changed < 3
    operations.set_periodic_enabled(obj, False)  # the admin's and the page's pause
    time.sleep(0.5)  # a fire in progress
    fired = len(periodic_requests(engine, "live-edit"))
    time.sleep(2.5)
    assert len(periodic_requests(engine, "live-edit")) == fired  # no more after the pause
