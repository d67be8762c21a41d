"""`manage.py queue_token USERNAME [--name N]`."""
from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import ManagementUtility, call_command
from django.core.management.base import CommandError

from queueadmin.core.auth import authenticate
from queueadmin.core.models import ApiToken

pytestmark = pytest.mark.django_db


def test_prints_a_new_key_that_authenticates(rf):
    user = User.objects.create_user("alice", is_staff=True)  # staff may read (the default scopes)
    out, err = StringIO(), StringIO()
    call_command("queue_token", "alice", "--name", "billing", stdout=out, stderr=err)
    key = out.getvalue().strip()
    assert key.startswith("qa_") and "\n" not in key
    assert "not shown again" in err.getvalue()
    token = ApiToken.objects.get()
    assert (token.user, token.name, token.key_hash) == (user, "billing", ApiToken.hash(key))
    assert authenticate(rf.get("/", headers={"Authorization": f"Bearer {key}"})) == token


@pytest.mark.parametrize("username, message", [("nobody", "unknown user 'nobody'"),
                                               ("gone", "user 'gone' is inactive")])
@pytest.mark.django_db(transaction=True)  # run_from_argv closes the connection on an error (PostgreSQL: the test's too)
def test_refusals_are_one_line_with_a_nonzero_exit(capsys, username, message):
    User.objects.create_user("gone", is_active=False)
    with pytest.raises(CommandError, match=message):
        call_command("queue_token", username)
    with pytest.raises(SystemExit) as exited:
        ManagementUtility(["manage.py", "queue_token", username]).execute()
    assert exited.value.code != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("CommandError: ") and message in lines[0]
    assert ApiToken.objects.count() == 0


def test_a_too_long_name_is_refused():
    User.objects.create_user("alice")
    with pytest.raises(CommandError, match="too long"):
        call_command("queue_token", "alice", "--name", "n" * 101)
