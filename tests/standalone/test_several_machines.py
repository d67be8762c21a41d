"""Several machines, one Redis and one PostgreSQL: a worker process whose
environment holds only REDIS_URL and DATABASE_URL (plus PATH and HOME)
records request history that a dashboard process, configured the same way,
shows after Redis has forgotten the request."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.engine_helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]

DASHBOARD = """
from django.contrib.auth.models import User
from django.test import Client
user = User.objects.create_superuser("ops", "ops@example.com", "not-used-here-1")
client = Client()
client.force_login(user)
for url in ("/requests/", "/requests/{rid}/"):
    response = client.get(url)
    print("PAGE", url, response.status_code)
    print(response.content.decode())
"""


def machine_env(redis_url: str, database_url: str) -> dict:
    """What a machine of the deployment is given: nothing of this test's environment."""
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "REDIS_URL": redis_url,
            "DATABASE_URL": database_url}


def manage(env: dict, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"manage.py {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


def history(postgres, dbname: str, rid: str):
    with postgres.connect(dbname) as conn:
        return conn.execute("SELECT state, total, done, failed, finished_at IS NOT NULL FROM queueadmin_requestrecord "
                            "WHERE id = %s", (rid,)).fetchone()


@pytest.mark.slow
def test_a_worker_with_only_redis_and_database_urls_records_history_the_dashboard_shows(postgres, redis_url, r, qc,
                                                                                       tmp_path):
    dbname = f"mm_{uuid.uuid4().hex[:8]}"
    env = machine_env(redis_url, postgres.create_database(dbname))
    manage(env, "migrate", "--noinput", "-v", "0")  # the operator, once

    log = open(tmp_path / "worker.log", "wb")
    worker = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "queue_worker", "--queues", "default"],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)  # "machine B"
    try:
        # a producer that talks to Redis only: the database learns of requests from the worker alone
        first = qc.submit("default", "uppercase", ["alpha", "beta", "gamma"])
        wait_for(lambda: history(postgres, dbname, first.id), 60, message=(tmp_path / "worker.log").read_text())
        assert history(postgres, dbname, first.id) == ("completed", 3, 3, 0, True)

        # the database drops every connection (a restart, a failover): the worker reconnects
        with postgres.connect() as conn:
            dropped = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                                   (dbname,)).fetchall()
        assert dropped, "the worker held no connection to the database"
        second = qc.submit("default", "fail", ["x"])
        wait_for(lambda: history(postgres, dbname, second.id), 60, message=(tmp_path / "worker.log").read_text())
        assert history(postgres, dbname, second.id) == ("failed", 1, 0, 1, True)
    finally:
        worker.terminate()
        worker.wait(30)
    r.flushall()  # Redis forgets the requests (as after their retention): only the history is left

    out = manage(env, "shell", "-c", DASHBOARD.replace("{rid}", first.id))  # "machine C": the dashboard
    pages = {}
    for chunk in out.split("PAGE ")[1:]:
        head, _, html = chunk.partition("\n")
        url, status = head.split()
        pages[url] = (int(status), html)
    listing_status, listing = pages["/requests/"]
    assert listing_status == 200 and first.id in listing and second.id in listing
    assert "completed" in listing and "failed" in listing
    detail_status, detail = pages[f"/requests/{first.id}/"]
    assert detail_status == 200 and "completed" in detail and "uppercase" in detail
