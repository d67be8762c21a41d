"""The database is chosen by DATABASE_URL (PostgreSQL through psycopg 3), with
SQLite at DATABASE_PATH as the embedded default; the test database is the
one QUEUEADMIN_TEST_DB asks for (bin/test runs the database-backed modules on
both)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.conftest import TEST_DB

ROOT = Path(__file__).resolve().parents[1]
SHOW = ("import json; from django.conf import settings; d = settings.DATABASES['default']; "
        "print(json.dumps({k: d.get(k) for k in ('ENGINE', 'NAME', 'HOST', 'PORT', 'USER', 'OPTIONS', "
        "'CONN_HEALTH_CHECKS')}, default=str))")


def settings_with(**env) -> dict:
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c", SHOW], cwd=ROOT, env={**base, **env},
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_database_url_selects_postgresql_without_the_sqlite_options():
    db = settings_with(DATABASE_URL="postgres://qa:s%40cret@db.example:6543/history")
    assert (db["ENGINE"], db["HOST"], db["PORT"], db["NAME"], db["USER"]) == \
        ("django.db.backends.postgresql", "db.example", 6543, "history", "qa")
    assert not db.get("OPTIONS") and db["CONN_HEALTH_CHECKS"] is True


def test_without_database_url_sqlite_at_database_path(tmp_path):
    db = settings_with(DATABASE_PATH=str(tmp_path / "x.sqlite3"))
    assert (db["ENGINE"], db["NAME"]) == ("django.db.backends.sqlite3", str(tmp_path / "x.sqlite3"))
    assert db["OPTIONS"]["transaction_mode"] == "IMMEDIATE" and "WAL" in db["OPTIONS"]["init_command"]


@pytest.mark.django_db
def test_the_test_database_is_the_one_asked_for():
    assert connection.vendor == {"sqlite": "sqlite", "postgres": "postgresql"}[TEST_DB]


def test_the_harness_runs_postgres_unprivileged_and_cleans_up():
    from tests.pg_harness import LocalPostgres

    with LocalPostgres() as pg:
        folder = pg.dir
        assert pg.port != 5432
        with pg.connect() as conn:
            owner = conn.execute("SELECT rolname FROM pg_roles WHERE rolsuper AND rolcreatedb").fetchall()
            assert ("queueadmin",) in owner  # the test role may create test databases
        if os.geteuid() == 0:
            assert folder.stat().st_uid != 0  # postgres refuses root: the harness runs it as nobody
    assert not folder.exists()
