"""`queue_steer` (core/management/commands/queue_steer.py): the dashboard's
actions from the command line, through core/operations.py, each recorded in
the audit log as the command with the OS user; bad input is a one-line
CommandError, never a traceback; `queue_token` records the tokens it issues."""
from __future__ import annotations

import getpass
import io

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from queueadmin.core import services
from queueadmin.core.audit import AuditEntry
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.models import Queue
from tests.engine_helpers import burst

pytestmark = pytest.mark.django_db

WHO = f"command queue_steer (OS user {getpass.getuser()})"


def steer(*args) -> str:
    out = io.StringIO()
    call_command("queue_steer", *args, stdout=out)
    return out.getvalue().strip()


def entries():
    return [(e.action, e.source, e.who, e.request_id, e.queue, e.count) for e in AuditEntry.objects.order_by("id")]


def test_steering_from_the_command_line_is_audited_as_the_command(engine):
    rid = services.submit("default", "echo", ["a", "b"], delay=600).id
    assert steer("priority", rid, "80") == f"request {rid}: priority 80"
    assert steer("concurrency", rid, "3") == f"request {rid}: concurrency limit 3"
    assert steer("run-now", rid) == f"request {rid} runs now"
    assert steer("cancel", rid) == f"request {rid} cancelled"
    assert engine.status(rid)["state"] == "cancelled"
    assert entries() == [("set_priority", "command", WHO, rid, "default", None),
                         ("set_concurrency", "command", WHO, rid, "default", None),
                         ("run_now", "command", WHO, rid, "default", None),
                         ("cancel", "command", WHO, rid, "default", 2)]
    assert AuditEntry.objects.get(action="set_priority").detail == {"from": 50, "to": 80}


def test_dead_letters_and_queues(engine):
    engine.define_queue("once", QueueConfig(max_attempts=1, backoff_seconds=0.01))
    rid = services.submit("once", "fail", ["x", "y"]).id
    burst(engine, ["once"])
    first = engine.dead_letters(rid)[0]["entry"]
    assert steer("retry", rid, first) == f"request {rid}: 1 dead letter(s) sent back"
    assert steer("discard", rid) == f"request {rid}: 1 dead letter(s) discarded"
    Queue.objects.create(name="reports")
    assert steer("pause", "reports") == "queue reports paused" and engine.queue_config("reports").paused
    assert steer("resume", "reports") == "queue reports resumed"
    assert [row[:2] + row[4:] for row in entries()] == [
        ("retry_dead", "command", "once", 1), ("discard", "command", "once", 1),
        ("pause_queue", "command", "reports", None), ("resume_queue", "command", "reports", None)]


@pytest.mark.parametrize("args,message", [
    (["cancel", "no such"], "is not a request id"),
    (["priority", "r1", "high"], "whole number"),
    (["concurrency", "r1", "0"], "from 1 to"),
    (["retry", "r1", "junk"], "is not an entry id"),
    (["pause", "nowhere"], "unknown queue"),
    (["run-now", "r1"], "not in the queue"),
    (["cancel", "r1"], "unknown request"),
])
def test_bad_input_is_one_line_and_nothing_is_recorded(engine, args, message):
    with pytest.raises(CommandError, match=message):
        steer(*args)
    assert not AuditEntry.objects.exists()


@pytest.mark.slow
def test_any_arguments_end_in_a_line_or_a_command_error(engine):
    rid = services.submit("default", "echo", ["a"], delay=600).id
    words = st.one_of(st.sampled_from(["cancel", "priority", "retry", "stop", "pause", "run-now", rid, "default",
                                       "1-0", "99", "-1"]), st.text(max_size=12))

    @hsettings(max_examples=120, deadline=None, derandomize=True, database=None,
               suppress_health_check=list(HealthCheck))
    @given(args=st.lists(words, min_size=1, max_size=4))
    def call(args):
        try:
            steer(*args)
        except (CommandError, SystemExit):
            pass  # argparse's usage errors end in SystemExit under call_command only for unknown options

    call()


def test_issued_tokens_are_audited(db):
    User.objects.create_user("ci", password="pw", is_staff=True)
    call_command("queue_token", "ci", "--name", "nightly", "--scopes", "read", stdout=io.StringIO(),
                 stderr=io.StringIO())
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.source) == ("issue_token", "command")
    assert entry.who.startswith("command queue_token (OS user ") and "(ci)" in entry.target
    assert entry.detail["scopes"] == ["read"] and "qa_" not in str(entry.detail)
