"""The audit log (core/audit.py), written by core/operations.py: each
operator action from the dashboard and the admin leaves one entry saying
who, when, what, on what and on how many items (the API's are in
tests/api/test_steering.py, the commands' in tests/commands/test_queue_steer.py);
nothing is recorded for a change that did not happen."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from queueadmin.core import operations, services
from queueadmin.core.audit import Actor, AuditEntry
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.models import ApiToken, Queue
from tests.engine_helpers import burst
from tests.views.test_views import register_worker, take_without_ack

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]


@pytest.fixture
def boss(client, engine):
    engine.define_queue("once", QueueConfig(max_attempts=1, backoff_seconds=0.01))
    user = User.objects.create_superuser("boss", "boss@example.com", "pw")
    client.force_login(user)
    return user


def made():
    return [(e.action, e.source, e.who, e.request_id, e.queue, e.target, e.count)
            for e in AuditEntry.objects.order_by("id")]


def test_dashboard_actions_on_a_request_say_who_when_what_and_how_many(client, boss, engine):
    before = timezone.now()
    rid = services.submit("default", "echo", ["a", "b", "c"], delay=600).id
    client.post(reverse("queueadmin:request_priority", args=[rid]), {"priority": "90"})
    client.post(reverse("queueadmin:request_concurrency", args=[rid]), {"concurrency": "2"})
    client.post(reverse("queueadmin:scheduled_action"), {"action": "run", "ids": [rid], "confirm": "1"})
    client.post(reverse("queueadmin:request_cancel", args=[rid]), {"confirm": "1"})
    assert made() == [("set_priority", "dashboard", "boss", rid, "default", "", None),
                      ("set_concurrency", "dashboard", "boss", rid, "default", "", None),
                      ("run_now", "dashboard", "boss", rid, "default", "", None),
                      ("cancel", "dashboard", "boss", rid, "default", "", 3)]
    first = AuditEntry.objects.order_by("id").first()
    assert first.user == boss and before <= first.at <= timezone.now()
    assert first.detail == {"from": 50, "to": 90}


def test_dashboard_dead_letters_in_flight_and_queues(client, boss, engine):
    rid = services.submit("once", "fail", ["x", "y", "z"]).id
    burst(engine, ["once"])
    dead = [d["entry"] for d in engine.dead_letters(rid)]
    client.post(reverse("queueadmin:dead_action"), {"action": "retry", "scope": "one", "ids": [f"{rid}:{dead[0]}"]})
    client.post(reverse("queueadmin:dead_action"), {"action": "discard", "scope": "selected", "confirm": "1",
                                                    "ids": [f"{rid}:{dead[1]}", f"{rid}:{dead[2]}"]})
    client.post(reverse("queueadmin:request_retry", args=[rid]))  # the one retried is dead again? not yet run: 0
    live = services.submit("default", "echo", ["p", "q"], concurrency=2).id
    register_worker(engine, "ghost:1:aa", time.time() * 1000)
    _, first = take_without_ack(engine, "default", "ghost:1:aa")
    _, second = take_without_ack(engine, "default", "ghost:1:aa")
    client.post(reverse("queueadmin:inflight_stop"), {"ids": [f"{live}:{first}"], "confirm": "1"})
    client.post(reverse("queueadmin:inflight_requeue"), {"scope": "one", "ids": [f"{live}:{second}"]})
    client.post(reverse("queueadmin:queue_pause", args=["default"]), {"paused": "1"})
    assert [row[:2] + row[3:] for row in made()] == [
        ("retry_dead", "dashboard", rid, "once", "", 1), ("discard", "dashboard", rid, "once", "", 2),
        ("stop_item", "dashboard", live, "default", "#0", 1), ("requeue", "dashboard", live, "default", "", 1),
        ("pause_queue", "dashboard", "", "default", "", None)]
    assert AuditEntry.objects.get(action="discard").detail == {"entries": dead[1:]}


def test_nothing_is_recorded_for_a_change_that_did_not_happen(client, boss, engine):
    rid = services.submit("default", "echo", ["a"]).id
    operations.cancel(rid)
    n = AuditEntry.objects.count()
    client.post(reverse("queueadmin:request_priority", args=[rid]), {"priority": "90"})  # finished: refused
    client.post(reverse("queueadmin:request_priority", args=[rid]), {"priority": "nine"})  # bad input
    with pytest.raises(QueueError):
        operations.retry_dead(rid)
    assert AuditEntry.objects.count() == n


def test_operations_without_an_actor_are_the_systems(engine):
    rid = services.submit("default", "echo", ["a"], delay=60).id
    operations.set_priority(rid, 10)
    entry = AuditEntry.objects.get()
    assert (entry.who, entry.source, entry.user) == ("system", "system", None)


def test_admin_edits_and_actions_are_recorded_as_the_admin_user(client, boss, engine):
    url = reverse("admin:queueadmin_queue_change", args=[Queue.objects.get(name="default").pk])
    form = {"priority": 70, "concurrency": 10, "lease_seconds": 60, "max_attempts": 3, "backoff_seconds": 1,
            "backoff_max_seconds": 300, "retention_seconds": 86400, "time_limit_seconds": 3600,
            "unrunnable_seconds": 3600, "_save": "Save"}
    assert client.post(url, form).status_code == 302
    client.post(reverse("admin:queueadmin_queue_changelist"),
                {"action": "pause_queues", "_selected_action": [Queue.objects.get(name="default").pk]})
    periodic = {"name": "nightly", "queue": "default", "processor": "echo", "items": "a", "interval_seconds": 60,
                "timezone": "UTC", "catch_up": "once", "enabled": "on", "_save": "Save"}
    assert client.post(reverse("admin:queueadmin_periodicrequest_add"), periodic).status_code == 302
    token, key = ApiToken.issue(boss, "ci")
    client.post(reverse("admin:queueadmin_apitoken_changelist"),
                {"action": "revoke", "_selected_action": [token.pk]})
    client.post(reverse("admin:queueadmin_apitoken_delete", args=[token.pk]), {"post": "yes"})
    rows = [(e.action, e.source, e.who, e.queue, e.target, e.count) for e in AuditEntry.objects.order_by("id")]
    assert rows[:3] == [("admin_change", "admin", "boss", "default", "queue default", None),
                        ("pause_queue", "admin", "boss", "default", "", None),
                        ("admin_add", "admin", "boss", "default", "periodic request nightly", None)]
    assert rows[3][:2] == ("admin_revoke", "admin") and rows[3][5] == 1
    assert rows[4][0] == "admin_delete" and rows[4][4].startswith("api token")
    changed = AuditEntry.objects.get(action="admin_change")
    assert changed.summary.startswith("changed Priority") and changed.detail["model"] == "queue"
    logged = str([(e.target, e.detail) for e in AuditEntry.objects.all()])
    assert key[8:] not in logged and token.webhook_secret not in logged  # its public prefix only


def test_entries_are_never_changed_but_outlive_their_user(boss):
    from queueadmin.core import audit

    entry = audit.record(Actor.dashboard(boss), "cancel", request_id="r1", count=1)
    entry.count = 5
    with pytest.raises(ValueError):
        entry.save()
    boss.delete()
    kept = AuditEntry.objects.get(pk=entry.pk)
    assert (kept.who, kept.user, kept.count) == ("boss", None, 1)
    assert kept.at > timezone.now() - timedelta(minutes=1)


def test_a_bulk_actions_filter_is_summed_up(db):
    from queueadmin.core import audit

    by_json = audit.record(None, "bulk_retry_dead", detail={"filter": '{"text":"Timeout","queue":"","since":null}'})
    by_label = audit.record(None, "bulk_cancel", detail={"filter": "cancel requests"})
    everything = audit.record(None, "bulk_requeue", detail={"filter": {"queue": ""}})
    assert by_json.summary == "filter: text Timeout"
    assert by_label.summary == "filter: cancel requests"
    assert everything.summary == "filter: everything"


def test_entries_recorded_in_a_batch_are_written_in_one_insert():
    """A bulk job's batch records one entry per request it touched; they reach
    the database together when the batch ends (a few INSERTs where SQLite
    caps a statement's parameters), not one each."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from queueadmin.core import audit
    with CaptureQueriesContext(connection) as queries:
        with audit.batched():
            for i in range(300):
                audit.record(Actor.system(), "cancel", request_id=f"r{i}", count=1)
            assert AuditEntry.objects.count() == 0  # nothing written before the batch ends
    inserts = [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("INSERT")]
    assert 1 <= len(inserts) <= 10
    assert sorted(AuditEntry.objects.values_list("request_id", flat=True)) == sorted(f"r{i}" for i in range(300))
