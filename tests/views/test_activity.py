"""The Activity page (core/views/activity.py) and the request page's
activity: the audit log, newest first, filtered and paged; readable by all
staff; bad filters never a 5xx; nothing on it changes an entry."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from queueadmin.core import audit, services
from queueadmin.core.audit import Actor, AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def entries(db):
    boss = User.objects.create_superuser("boss", "boss@example.com", "pw")
    audit.record(Actor.dashboard(boss), "cancel", queue="default", request_id="r1", count=3)
    audit.record(Actor.command("queue_steer"), "pause_queue", queue="reports")
    old = audit.record(Actor.admin(boss), "admin_change", queue="default", target="queue default",
                       detail={"changes": [{"changed": {"fields": ["Priority"]}}]})
    AuditEntry.objects.filter(pk=old.pk).update(at=timezone.now() - timedelta(days=3))
    return boss


def rows(response):
    return [(e.action, e.source) for e in response.context["rows"]]


def test_lists_entries_newest_first_for_any_staff(client, viewer, entries):
    client.force_login(viewer)  # may view, not act
    page = client.get(reverse("queueadmin:activity"))
    assert page.status_code == 200
    assert rows(page) == [("pause_queue", "command"), ("cancel", "dashboard"), ("admin_change", "admin")]
    html = page.content.decode()
    assert "changed Priority" in html and "queue_steer" in html and 'aria-current="page">Activity' in html
    assert 'method="post"' not in html.split('id="activity-table"')[1], "nothing to change here"


def test_filters(client, entries):
    client.force_login(entries)
    url = reverse("queueadmin:activity")
    assert rows(client.get(url, {"who": "BOSS"})) == [("cancel", "dashboard"), ("admin_change", "admin")]
    assert rows(client.get(url, {"source": "command"})) == [("pause_queue", "command")]
    assert rows(client.get(url, {"action": "cancel"})) == [("cancel", "dashboard")]
    assert rows(client.get(url, {"queue": "default"})) == [("cancel", "dashboard"), ("admin_change", "admin")]
    assert rows(client.get(url, {"request": "r1"})) == [("cancel", "dashboard")]
    assert rows(client.get(url, {"action": "quiet_worker"})) == []  # not recorded yet: none, not an error
    assert rows(client.get(url, {"since": "24h"})) == [("pause_queue", "command"), ("cancel", "dashboard")]
    day = (timezone.now() - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    assert rows(client.get(url, {"at_to": day})) == [("admin_change", "admin")]
    assert rows(client.get(url, {"at_from": day, "source": "dashboard"})) == [("cancel", "dashboard")]
    htmx = client.get(url, {"source": "admin"}, headers={"HX-Request": "true"})
    assert b"<html" not in htmx.content and b"activity-table" in htmx.content


def test_pages_of_fifty(client, entries):
    client.force_login(entries)
    for n in range(60):
        audit.record(Actor.system(), "requeue", request_id=f"p{n}", count=n)
    first = client.get(reverse("queueadmin:activity"))
    assert len(first.context["rows"]) == 50 and first.context["pg"].total == 63
    second = client.get(reverse("queueadmin:activity"), {"page": "2"})
    assert len(second.context["rows"]) == 13 and "page=2" not in second.context["filter_qs"]


def test_bad_filters_are_said_not_applied(client, entries):
    client.force_login(entries)
    page = client.get(reverse("queueadmin:activity"), {"source": "carrier pigeon", "at_from": "yesterday",
                                                         "request": "no such/id", "page": "x"})
    assert page.status_code == 200 and len(page.context["rows"]) == 3
    assert set(page.context["filter_errors"]) == {"source", "at_from", "request"}


def test_anonymous_and_non_staff_cannot_read(client, entries):
    assert client.get(reverse("queueadmin:activity")).status_code == 302
    client.force_login(User.objects.create_user("outsider", password="pw"))
    assert client.get(reverse("queueadmin:activity")).status_code == 403
    client.force_login(entries)
    assert client.post(reverse("queueadmin:activity")).status_code == 405


def test_entries_cannot_be_changed_or_deleted(entries, client):
    entry = AuditEntry.objects.first()
    entry.who = "someone else"
    with pytest.raises(ValueError):
        entry.save()
    with pytest.raises(ValueError):
        entry.delete()
    assert AuditEntry.objects.get(pk=entry.pk).who != "someone else"
    client.force_login(entries)  # a superuser: the admin has no page for them either
    assert client.get("/admin/queueadmin/auditentry/").status_code == 404
    assert client.get(f"/admin/queueadmin/auditentry/{entry.pk}/change/").status_code == 404


def test_the_request_page_shows_the_entries_that_touched_it(client, eng, entries):
    rid = services.submit("default", "echo", ["a"], delay=600).id
    client.force_login(entries)
    client.post(reverse("queueadmin:request_priority", args=[rid]), {"priority": "77"})
    audit.record(Actor.system(), "cancel", request_id="another")
    page = client.get(reverse("queueadmin:request_detail", args=[rid])).content.decode()
    panel = page.split('id="request-activity"')[1]
    assert "set priority" in panel and "→ 77" in panel and "another" not in panel and "1 action on" in panel


@pytest.mark.slow
def test_any_filter_input_gets_a_page_or_a_4xx_never_a_5xx(client, entries):
    client.force_login(entries)
    fields = ["who", "source", "action", "queue", "request", "since", "at_from", "at_to", "page"]
    texts = st.one_of(st.text(max_size=40), st.sampled_from(["cancel", "api", "1h", "2026-01-01T00:00",
                                                             "0001-01-01", "9999-12-31T23:59", "-1", "99999999"]))

    @hsettings(max_examples=150, deadline=None, derandomize=True, database=None,
               suppress_health_check=list(HealthCheck))
    @given(params=st.dictionaries(st.sampled_from(fields), texts, max_size=5))
    def look(params):
        clean = dict(params)  # NUL included: the form refuses it (the database would)
        response = client.get(reverse("queueadmin:activity"), clean)
        assert response.status_code in (200, 400), (params, response.status_code)
        if response.status_code == 200:
            form = response.context["form"]
            for name in form.cleaned_data if form.is_bound and form.is_valid() else ():
                if clean.get(name) and name not in ("at_from", "at_to", "page", "who"):
                    assert str(form.cleaned_data[name]) == clean[name]  # accepted input is taken as given

    look()


def test_the_queue_page_says_who_paused_it(client, eng, entries):
    client.force_login(entries)
    client.post(reverse("queueadmin:queue_pause", args=["default"]), {"paused": "1"})
    page = client.get(reverse("queueadmin:queue_detail", args=["default"])).content.decode()
    panel = page.split('id="queue-activity"')[1]
    first = panel.split("<tbody>")[1].split("</tr>")[0]
    assert "pause queue" in first and "boss" in first
    assert "3 actions on this queue" in panel  # the pause, the cancel of r1 and the admin's change


def test_hostile_names_are_shown_as_text(client, entries):
    client.force_login(entries)
    audit.record(Actor("token <script>alert(1)</script> (x)", "api"), "cancel",
                 target="<img src=x onerror=alert(1)>", detail={"reason": "<b>bold</b>"})
    html = client.get(reverse("queueadmin:activity")).content.decode()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "<b>bold</b>" not in html
