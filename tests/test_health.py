"""/healthz (the process is up: no I/O) and /readyz (Redis and the database
answer, else 503): unauthenticated, cheap."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.urls import path

from queueadmin.core import embedded, health, services

ROOT = Path(__file__).resolve().parents[1]
urlpatterns = [path("healthz", health.healthz), path("readyz", health.readyz)]
pytestmark = pytest.mark.urls(__name__)  # the site mounts the same views (queueadmin/urls.py)


@pytest.fixture
def own_redis(tmp_path, settings):
    """A redis-server of this test alone, so that the test can stop it."""
    port = embedded.free_port()
    proc = embedded.start(port, tmp_path / "redis", appendonly=False)
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    services.reset()
    yield proc
    embedded.stop(proc)
    services.reset()


def test_healthz_answers_without_redis_or_database(client, settings):
    """No django_db mark: a query would raise, so this shows it makes none."""
    settings.REDIS_URL = f"redis://127.0.0.1:{embedded.free_port()}/0"  # nobody there
    services.reset()
    response = client.get("/healthz")
    assert response.status_code == 200 and response.content == b"ok\n"
    assert "no-cache" in response["Cache-Control"]
    assert client.head("/healthz").status_code == 200
    assert client.post("/healthz").status_code == 405


@pytest.mark.django_db
def test_readyz_turns_503_when_redis_stops(client, own_redis):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"redis": "ok", "database": "ok"}}

    embedded.stop(own_redis)
    started = time.monotonic()
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable" and body["checks"]["database"] == "ok"
    assert body["checks"]["redis"].startswith("error: ")
    assert time.monotonic() - started < 5  # a probe must not hang


def test_readyz_turns_503_when_the_database_is_unreachable(redis_url):
    """A web process whose DATABASE_URL points at nothing (run apart: the
    database is chosen when settings load)."""
    code = ("from django.test import Client; r = Client().get('/readyz'); "
            "print('RESULT', r.status_code, r.content.decode())")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "REDIS_URL": redis_url,
           "DATABASE_URL": f"postgres://nobody@127.0.0.1:{embedded.free_port()}/none"}
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, out.stdout + out.stderr
    status, _, body = line[len("RESULT "):].partition(" ")
    assert status == "503"
    assert json.loads(body)["checks"] == {"redis": "ok", "database": "error: OperationalError"}


def test_probes_are_not_redirected_to_https(client, settings):
    """DJANGO_SECURE=1 redirects plain HTTP to HTTPS, but a load balancer
    probes the backend over HTTP: the probes answer."""
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/healthz").status_code == 200
    assert client.get("/requests/").status_code == 301


def test_the_site_mounts_the_probes_and_metrics():
    from django.urls import resolve

    from queueadmin.core import metrics

    site = "queueadmin.urls"
    assert resolve("/healthz", urlconf=site).func is health.healthz
    assert resolve("/readyz", urlconf=site).func is health.readyz
    assert resolve("/metrics", urlconf=site).func is metrics.metrics_view
