"""The workers page's Quiet and Stop (views/workers.py worker_control): a
confirmation that names the worker by the name every page shows (no giant
count), POST with CSRF for staff who may act, the ask left in Redis for the
worker's heartbeat (client/workers.py), an audit entry, and a clear message,
never a 5xx, for whatever else is posted. Real redis-server."""
from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queueadmin.core.audit import AuditEntry
from tests.views.test_pages import register

pytestmark = pytest.mark.django_db

URL = "/workers/control/"
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def test_the_workers_page_names_workers_host_pid_with_quiet_and_stop_buttons(staff, eng):
    register(eng, "vm:10707:ab12", host="web1", pid=10707, name="vm:10707")
    register(eng, "vm:10708:cd34", host="web1", pid=10708, name="api1", state="quiet")
    body = staff.get(reverse("queueadmin:workers")).content.decode()
    assert reverse("queueadmin:worker_control") == URL
    assert ">vm:10707<" in body and ">vm:10708<" in body and "api1" in body  # one name, a given one beside
    assert 'form="worker-quiet-form" name="worker" value="vm:10707:ab12"' in body
    assert 'form="worker-quiet-form" name="worker" value="vm:10708:cd34"' not in body  # already quiet
    assert 'form="worker-stop-form" name="worker" value="vm:10708:cd34"' in body and ">quiet</span>" in body


def test_quiet_asks_for_confirmation_then_leaves_the_ask_for_the_worker(staff, eng):
    register(eng, "vm:10707:ab12", host="web1", pid=10707)
    ask = staff.post(URL, {"command": "quiet", "worker": "vm:10707:ab12"}, HTTP_HX_REQUEST="true")
    text = ask.content.decode()
    assert ask.status_code == 200 and "Quiet worker vm:10707 (host web1, pid 10707)?" in text
    assert "data-confirm-count" not in text  # one worker: no giant number
    assert not eng.redis.exists(eng.keys.worker_control("vm:10707:ab12"))
    done = staff.post(URL, {"command": "quiet", "worker": "vm:10707:ab12", "confirm": "1"})
    assert done.status_code == 302 and done["Location"] == reverse("queueadmin:workers")
    assert eng.redis.get(eng.keys.worker_control("vm:10707:ab12")) == "quiet"
    entry = AuditEntry.objects.get(action="quiet_worker")
    assert entry.who == "boss" and entry.source == "dashboard" and entry.target == "worker vm:10707"
    assert entry.detail == {"worker": "vm:10707:ab12"}
    staff.post(URL, {"command": "stop", "worker": "vm:10707:ab12", "confirm": "1"})
    assert eng.redis.get(eng.keys.worker_control("vm:10707:ab12")) == "stop"


def test_a_dead_or_unknown_worker_gets_a_message_not_an_ask(staff, eng):
    register(eng, "gone:1:aa", beat_ms=1000)
    for wid in ("gone:1:aa", "nobody:2:bb"):
        resp = staff.post(URL, {"command": "stop", "worker": wid, "confirm": "1"}, follow=True)
        assert resp.status_code == 200 and "No live worker by that name" in resp.content.decode()
        assert not eng.redis.exists(eng.keys.worker_control(wid))
    assert not AuditEntry.objects.exists()


def test_only_staff_who_may_act_and_only_by_post_with_csrf(client, viewer, eng):
    register(eng, "vm:10707:ab12")
    client.force_login(viewer)
    assert client.post(URL, {"command": "stop", "worker": "vm:10707:ab12", "confirm": "1"}).status_code == 403
    assert "worker-stop-form" not in client.get(reverse("queueadmin:workers")).content.decode()
    csrf = Client(enforce_csrf_checks=True)
    csrf.force_login(viewer.__class__.objects.create_superuser("root", "r@example.com", "pw"))
    assert csrf.post(URL, {"command": "stop", "worker": "vm:10707:ab12", "confirm": "1"}).status_code == 403
    assert csrf.get(URL).status_code == 405
    assert not eng.redis.exists(eng.keys.worker_control("vm:10707:ab12"))


@FUZZ
@given(command=st.one_of(st.sampled_from(["quiet", "stop", "", "QUIET", "reboot"]), st.text(max_size=30)),
       worker=st.one_of(st.just("vm:10707:ab12"), st.text(max_size=80)), confirm=st.sampled_from(["", "1", "x"]))
def test_whatever_is_posted_gets_a_page_or_a_redirect_never_a_5xx(staff, eng, command, worker, confirm):
    register(eng, "vm:10707:ab12")
    eng.redis.delete(eng.keys.worker_control("vm:10707:ab12"))
    resp = staff.post(URL, {"command": command, "worker": worker, "confirm": confirm})
    assert resp.status_code in (200, 302)
    asked = eng.redis.get(eng.keys.worker_control("vm:10707:ab12"))
    accepted = command in ("quiet", "stop") and worker == "vm:10707:ab12" and confirm == "1"
    assert asked == (command if accepted else None)  # accepted input round-trips to the worker's key
