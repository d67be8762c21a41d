"""Groups (issue 23, part 1) at the Django side's entry points: the API's
submit body, Django Tasks' `group()` context manager and `enqueue_many`,
the admin's queue group limits (synced to Redis), the queue page's Groups
table, a periodic request's group, `queue_submit --group`."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features import periodic
from queueadmin.core.models import PeriodicRequest, Queue, QueueGroup
from queueadmin.core.tasks import enqueue_many, group
from tests.taskapp import tasks

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]


def meta_group(client, rid):
    return client.redis.hget(client.keys.request(rid).meta, "group")


def reqs_group(client, queue, rid):
    """The group of the request's entry in its queue's reqs; None for none, and for a one-item
    request of no group waiting packed, which has no entry (lua/_common.lua waiting_packed)."""
    value = client.redis.hget(client.keys.queue(queue).reqs, rid)
    parts = (value or "").split("|")
    return parts[4] if len(parts) == 5 else None


# -- API ---------------------------------------------------------------------------


def test_the_api_takes_a_group_and_refuses_a_bad_one(engine, api):
    response = api.post("/api/requests", {"queue": "default", "processor": "uppercase", "items": ["a", "b"],
                                          "group": "customer-42"})
    assert response.status_code == 201, response.content
    rid = response.json()["id"]
    assert meta_group(engine, rid) == "customer-42" and reqs_group(engine, "default", rid) == "customer-42"
    for bad in ["a|b", "x" * 65, "line\nbreak", 7, ""]:
        refused = api.post("/api/requests", {"queue": "default", "processor": "uppercase", "items": ["a"],
                                             "group": bad})
        assert refused.status_code == 400, (bad, refused.content)
        assert "group" in refused.json()["error"].lower() or "group" in str(refused.json())


# -- Django Tasks ------------------------------------------------------------------


@pytest.fixture
def taskapp(settings, redis_url):
    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "PROCESSORS": dict(settings.QUEUEADMIN["PROCESSORS"])}
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "tests.taskapp"]
    services.reset()
    client = services.engine()
    client.define_queue("default", QueueConfig())
    return client


def test_tasks_enqueued_inside_group_belong_to_it(taskapp):
    with group("customer-42"):
        inside = tasks.add.enqueue(1, 2)
        batch = enqueue_many(tasks.add, [(1, 2), (3, 4)])
        named = enqueue_many(tasks.add, [(5, 6)], group="other")
    outside = tasks.add.enqueue(2, 3)
    assert meta_group(taskapp, inside.id) == "customer-42"
    assert reqs_group(taskapp, "default", inside.id) == "customer-42"
    assert meta_group(taskapp, batch.id) == "customer-42" and meta_group(taskapp, named.id) == "other"
    assert meta_group(taskapp, outside.id) is None and reqs_group(taskapp, "default", outside.id) is None
    with pytest.raises(QueueError, match="group"):
        with group("bad|name"):
            pass
    with pytest.raises(QueueError, match="group"):
        enqueue_many(tasks.add, [(1, 1)], group="x" * 65)


# -- admin, queue page ---------------------------------------------------------------


@pytest.fixture
def admin_client(client, db):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_group_limits_in_the_admin_reach_redis_and_the_queue_page_shows_groups(engine, admin_client):
    queue = Queue.objects.get(name="default")
    url = reverse("admin:queueadmin_queue_change", args=[queue.pk])
    form = {"priority": 50, "concurrency": 10, "lease_seconds": 60, "max_attempts": 3, "backoff_seconds": 1,
            "backoff_max_seconds": 300, "retention_seconds": 86400, "time_limit_seconds": 3600,
            "unrunnable_seconds": 3600, "group_concurrency": 4, "group_rate_limit": "10 / s",
            "groups-TOTAL_FORMS": 1, "groups-INITIAL_FORMS": 0, "groups-MIN_NUM_FORMS": 0,
            "groups-MAX_NUM_FORMS": 1000, "groups-0-name": "vip", "groups-0-concurrency": 1,
            "groups-0-rate_limit": "", "_save": "Save"}
    response = admin_client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:3000]
    config = engine.queue_config("default")
    assert (config.group_concurrency, config.group_rate_limit) == (4, "10/s")
    qk = engine.keys.queue("default")
    assert engine.redis.hget(qk.glimits, "vip") == "1|"
    assert engine.redis.hget(qk.config, "group_rate_spec").startswith("10|1000|")

    engine.submit("default", "uppercase", ["a", "b", "c"], group="vip", concurrency=3)
    engine.store.queue.cycle("default", "w1", 60_000, 10, aging=False, live_workers=1, least_share=1, lacks="",
                             releases=[])
    html = admin_client.get(reverse("queueadmin:queue_detail", args=["default"])).content.decode()
    assert 'id="groups-table"' in html and 'data-group="vip"' in html and "throttled" in html

    QueueGroup.objects.get(name="vip").delete()
    assert engine.redis.hget(qk.glimits, "vip") is None
    with pytest.raises(Exception):
        QueueGroup(queue=queue, name="a|b").full_clean()


def test_a_form_posted_without_the_group_rows_still_saves(engine, admin_client):
    url = reverse("admin:queueadmin_queue_change", args=[Queue.objects.get(name="default").pk])
    form = {"priority": 50, "concurrency": 10, "lease_seconds": 7, "max_attempts": 3, "backoff_seconds": 1,
            "backoff_max_seconds": 300, "retention_seconds": 86400, "time_limit_seconds": 3600,
            "unrunnable_seconds": 3600, "_save": "Save"}
    assert admin_client.post(url, form).status_code == 302
    assert engine.queue_config("default").lease_seconds == 7


# -- periodic requests, queue_submit ------------------------------------------------------


def test_a_periodic_requests_group_goes_with_each_fire(engine):
    p = PeriodicRequest.objects.create(name="nightly", queue_id="default", processor="uppercase", items="a\nb",
                                       interval_seconds=3600, group="tenant-7")
    d = p.to_definition()
    assert periodic.Definition.from_json(d.to_json()).group == "tenant-7"
    rid = periodic.fire(engine, d, 1_000_000)
    assert meta_group(engine, rid) == "tenant-7" and reqs_group(engine, "default", rid) == "tenant-7"
    plain = periodic.Definition(name="x", queue="default", processor="uppercase", items=["a"], interval=60)
    assert "group" not in plain.to_json()


def test_queue_submit_takes_a_group(engine, tmp_path, capsys):
    f = tmp_path / "items.txt"
    f.write_text("a\nb\n")
    call_command("queue_submit", str(f), "--processor", "uppercase", "--group", "cli-group")
    rid = capsys.readouterr().out.strip().splitlines()[-1]
    assert meta_group(engine, rid) == "cli-group"
