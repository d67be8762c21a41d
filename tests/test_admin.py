"""The Django admin: queue settings reach Redis (what running workers read),
pause/resume, API tokens shown once, a read-only and escaped request
history, users with their tokens; plus the `can_act` role rule."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import AnonymousUser, Permission, User
from django.test import RequestFactory
from django.urls import reverse

from queueadmin.core import embedded, services
from queueadmin.core.auth import authenticate, can_act
from queueadmin.core.models import ApiToken, Queue, RequestRecord

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]

XSS = "<script>alert(1)</script>"


@pytest.fixture
def admin_client(client, db):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def queue_form(**changes):
    data = {"priority": 50, "concurrency": 10, "lease_seconds": 60, "max_attempts": 3, "backoff_seconds": 1,
            "backoff_max_seconds": 300, "retention_seconds": 86400, "time_limit_seconds": 3600,
            "unrunnable_seconds": 3600, "_save": "Save"}
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def change_url(queue):
    return reverse("admin:queueadmin_queue_change", args=[Queue.objects.get(name=queue).pk])


# -- queue configuration ---------------------------------------------------------


def test_a_change_in_the_admin_reaches_the_redis_config(engine, admin_client):
    assert engine.queue_config("default").lease_seconds == 60
    response = admin_client.post(change_url("default"), queue_form(lease_seconds=5, max_attempts=7, priority=80,
                                                                   paused="on"))
    assert response.status_code == 302, response.content
    config = engine.queue_config("default")  # what every worker reads
    assert (config.lease_seconds, config.max_attempts, config.priority, config.paused) == (5.0, 7, 80, True)
    assert Queue.objects.get(name="default").lease_seconds == 5


def test_a_queue_added_in_the_admin_is_known_to_redis(engine, admin_client):
    response = admin_client.post(reverse("admin:queueadmin_queue_add"), queue_form(name="emails", concurrency=3))
    assert response.status_code == 302
    assert "emails" in engine.queues() and engine.queue_config("emails").concurrency == 3


@pytest.mark.parametrize("changes, message", [
    ({"priority": 100}, "less than or equal to 99"),
    ({"concurrency": 0}, "greater than or equal to 1"),
    ({"lease_seconds": 0}, "greater than or equal to 0.1"),
    ({"max_attempts": 0}, "greater than or equal to 1"),
    ({"backoff_seconds": 10, "backoff_max_seconds": 5}, "cannot be shorter than the first"),
    ({"retention_seconds": "soon"}, "Enter a whole number"),
])
def test_invalid_settings_are_refused_and_redis_is_untouched(engine, admin_client, changes, message):
    response = admin_client.post(change_url("default"), queue_form(**changes))
    assert response.status_code == 200 and message in response.content.decode()
    assert engine.queue_config("default").priority == 50 and engine.queue_config("default").lease_seconds == 60


def test_a_queue_name_cannot_be_changed_or_deleted(engine, admin_client):
    admin_client.post(change_url("default"), queue_form(name="renamed"))
    assert Queue.objects.filter(name="default").exists() and not Queue.objects.filter(name="renamed").exists()
    response = admin_client.get(reverse("admin:queueadmin_queue_delete", args=[Queue.objects.get(name="default").pk]))
    assert response.status_code == 403


def test_pause_and_resume_actions(engine, admin_client):
    Queue.objects.create(name="other")
    ids = [str(q.pk) for q in Queue.objects.all()]
    url = reverse("admin:queueadmin_queue_changelist")
    response = admin_client.post(url, {"action": "pause_queues", "_selected_action": ids}, follow=True)
    assert "Paused 2 queue(s)" in response.content.decode()
    assert engine.queue_config("default").paused and engine.queue_config("other").paused
    admin_client.post(url, {"action": "resume_queues", "_selected_action": ids[:1]})
    assert not engine.queue_config(Queue.objects.get(pk=ids[0]).name).paused


def test_the_queue_list_shows_what_workers_see(engine, admin_client):
    services.submit("default", "echo", ["a", "b"])
    page = admin_client.get(reverse("admin:queueadmin_queue_changelist")).content.decode()
    assert "this config" in page
    engine.set_paused("default", True)  # Redis changed behind the database's back
    page = admin_client.get(reverse("admin:queueadmin_queue_changelist")).content.decode()
    assert "a different config: save again" in page


def test_redis_down_refuses_the_save_instead_of_a_500(engine, admin_client, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{embedded.free_port()}/0"
    services.reset()
    response = admin_client.post(change_url("default"), queue_form(priority=90))
    assert response.status_code == 200 and "unreachable" in response.content.decode()
    assert Queue.objects.get(name="default").priority == 50
    page = admin_client.get(reverse("admin:queueadmin_queue_changelist"))
    assert page.status_code == 200 and "unavailable" in page.content.decode()


# -- API tokens ------------------------------------------------------------------


def test_a_new_token_key_is_shown_once_and_works(engine, admin_client):
    user = User.objects.create_user("producer", password="pw")
    response = admin_client.post(reverse("admin:queueadmin_apitoken_add"), {"user": user.pk, "name": "ci",
                                                                     "scopes": ["metrics"]}, follow=True)
    page = response.content.decode()
    key = re.search(r"is (qa_[A-Za-z0-9_-]+) ", page)[1]
    token = ApiToken.objects.get()
    assert token.user == user and token.name == "ci" and token.key_hash == ApiToken.hash(key)
    assert token.prefix == key[:8] and key not in token.key_hash
    again = admin_client.get(reverse("admin:queueadmin_apitoken_change", args=[token.pk])).content.decode()
    assert key not in again and token.prefix in again
    request = RequestFactory().get("/api/queues", headers={"Authorization": f"Bearer {key}"})
    assert authenticate(request) == token


def test_inactive_users_are_not_offered_tokens(engine, admin_client):
    User.objects.create_user("gone", password="pw", is_active=False)
    page = admin_client.get(reverse("admin:queueadmin_apitoken_add")).content.decode()
    assert ">gone<" not in page and ">root<" in page


def test_users_page_lists_their_tokens(engine, admin_client):
    user = User.objects.create_user("producer", password="pw")
    token, _ = ApiToken.issue(user, "nightly job")
    page = admin_client.get(reverse("admin:auth_user_change", args=[user.pk])).content.decode()
    assert token.prefix in page and "nightly job" in page


# -- request history ---------------------------------------------------------------


def test_request_history_is_escaped_searchable_and_filterable(engine, admin_client):
    rid = services.submit("default", "echo", [XSS, "plain"]).id
    url = reverse("admin:queueadmin_requestrecord_changelist")
    for query in ("", "?q=alert", f"?q={rid}", "?state__exact=queued", "?queue=default"):
        page = admin_client.get(url + query).content.decode()
        assert rid in page, query
        assert XSS not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page, query
    assert rid not in admin_client.get(url + "?state__exact=completed").content.decode()
    detail = admin_client.get(reverse("admin:queueadmin_requestrecord_change", args=[rid])).content.decode()
    assert XSS not in detail and "&lt;script&gt;" in detail


def test_request_history_is_read_only(engine, admin_client):
    rid = services.submit("default", "echo", ["a"]).id
    assert admin_client.get(reverse("admin:queueadmin_requestrecord_add")).status_code == 403
    assert admin_client.get(reverse("admin:queueadmin_requestrecord_delete", args=[rid])).status_code == 403
    response = admin_client.post(reverse("admin:queueadmin_requestrecord_change", args=[rid]), {"state": "completed"})
    assert response.status_code == 403 and RequestRecord.objects.get(pk=rid).state == "queued"


def test_staff_without_permissions_cannot_change_queues(engine, client):
    client.force_login(User.objects.create_user("staff", password="pw", is_staff=True))
    assert client.post(change_url("default"), queue_form(priority=1)).status_code == 403
    assert engine.queue_config("default").priority == 50


# -- roles ---------------------------------------------------------------------------


def test_can_act():
    root = User.objects.create_superuser("root", "r@example.com", "pw")
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    operator = User.objects.create_user("operator", password="pw", is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="change_requestrecord"))
    operator = User.objects.get(pk=operator.pk)  # permissions are cached per instance
    assert can_act(root) and can_act(operator)
    assert not can_act(staff) and not can_act(AnonymousUser()) and not can_act(None)
    operator.is_active = False
    assert not can_act(operator)
