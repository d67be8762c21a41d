"""`manage.py check` says what is wrong with a project's queueadmin set-up
(queueadmin/core/checks.py) instead of a KeyError or a traceback at run time;
and an old database (the app's label was `core`) is adopted, not recreated."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core import checks
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[1]


def found(**settings_changes) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for msg in checks.run_checks(tags=["queueadmin"]):
        out.setdefault(msg.id, []).append(msg.msg)
    return out


def test_a_correct_setup_has_nothing_to_report(settings):
    settings.QUEUEADMIN_GENERATED_SECRETS = []  # as where they are given in the environment
    assert found() == {}
    call_command("check")  # raises SystemCheckError on an error


def test_no_redis_url_is_an_error(settings, monkeypatch):
    monkeypatch.delenv("REDIS_URL", raising=False)
    settings.REDIS_URL = None
    assert "REDIS_URL is not set" in found()["queueadmin.E010"][0]
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # the environment is enough
    assert "queueadmin.E010" not in found()


def test_a_url_that_is_not_redis_is_an_error_that_hides_the_password(settings):
    settings.REDIS_URL = "http://user:hunter2@example.com:80/"
    (message,) = found()["queueadmin.E011"]
    assert "not a Redis URL" in message and "hunter2" not in message


def test_a_processor_that_does_not_import_is_an_error(settings):
    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "PROCESSORS": {"thumb": "no.such.module.thumb"}}
    assert "'thumb' cannot be imported" in found()["queueadmin.E001"][0]


def test_sqlite_without_the_options_history_writes_need_is_a_warning(settings):
    db = settings.DATABASES["default"]
    settings.DATABASES = {"default": {**db, "ENGINE": "django.db.backends.sqlite3", "OPTIONS": {}}}
    (message,) = found()["queueadmin.W010"]
    assert "database is locked" in message
    settings.DATABASES = {"default": {**db, "ENGINE": "django.db.backends.sqlite3",
                                      "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"}}}
    assert "queueadmin.W010" not in found()


def test_a_secret_generated_on_one_of_several_machines_is_a_warning(settings):
    settings.DATABASES = {"default": {**settings.DATABASES["default"], "ENGINE": "django.db.backends.postgresql"}}
    settings.QUEUEADMIN_GENERATED_SECRETS = ["WEBHOOK_SECRET"]
    (message,) = found()["queueadmin.W011"]
    assert "WEBHOOK_SECRET was generated on this machine" in message
    settings.QUEUEADMIN_GENERATED_SECRETS = []
    assert "queueadmin.W011" not in found()


def test_the_standalone_service_lists_the_secrets_it_generated(tmp_path):
    code = "from django.conf import settings; import json; print(json.dumps(settings.QUEUEADMIN_GENERATED_SECRETS))"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "QUEUEADMIN"))}
    env.update(QUEUEADMIN_VAR=str(tmp_path), DJANGO_SETTINGS_MODULE="queueadmin.settings")
    run = lambda **e: json.loads(subprocess.run(  # noqa: E731
        [sys.executable, "-c", f"import django; django.setup(); {code}"], cwd=ROOT, env={**env, **e},
        capture_output=True, text=True, check=True).stdout)
    assert run() == ["SECRET_KEY", "WEBHOOK_SECRET"]
    assert run(QUEUEADMIN_WEBHOOK_SECRET="shared", DJANGO_SECRET_KEY="also-shared") == []


LEGACY = """
import django, sqlite3, sys
django.setup()
from django.core.management import call_command
from django.db import connection
call_command("migrate", verbosity=0)
call_command("migrate", "queueadmin", "0007", verbosity=0)  # the last migration made before the package
# the layout of a database made when the app's label was `core`
with connection.cursor() as c:
    for t in ("queue", "apitoken", "requestrecord", "periodicrequest"):
        c.execute(f"ALTER TABLE queueadmin_{t} RENAME TO core_{t}")
    c.execute("UPDATE django_migrations SET app = 'core' WHERE app = 'queueadmin'")
    c.execute("UPDATE django_content_type SET app_label = 'core' WHERE app_label = 'queueadmin'")
    c.execute("INSERT INTO core_queue (name, priority, concurrency, lease_seconds, max_attempts, backoff_seconds, "
              "backoff_max_seconds, retention_seconds, paused, time_limit_seconds, rate_limit) "
              "VALUES ('emails', 7, 3, 60, 3, 1, 300, 86400, 0, 3600, '')")
connection.close()
from queueadmin.core import legacy
print(legacy.adopt_core_tables(), legacy.adopt_core_tables())
call_command("migrate", verbosity=0)
from queueadmin.core.models import Queue
from django.contrib.auth.models import Permission
print(sorted(Queue.objects.values_list("name", "priority")))
print(Permission.objects.filter(content_type__app_label="queueadmin", codename="change_requestrecord").count())
"""


def test_a_database_from_before_the_package_keeps_its_rows_under_the_new_label(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "QUEUEADMIN", "DATABASE"))}
    env.update(QUEUEADMIN_VAR=str(tmp_path), DATABASE_PATH=str(tmp_path / "old.sqlite3"),
               DJANGO_SETTINGS_MODULE="queueadmin.settings")
    done = subprocess.run([sys.executable, "-c", LEGACY], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    adopted, queues, permissions = done.stdout.strip().splitlines()
    assert adopted == "True False"  # once
    assert queues == "[('default', 50), ('emails', 7)]"
    assert permissions == "1"


pytestmark = [pytest.mark.django_db, pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")]
