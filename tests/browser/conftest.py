"""End-to-end fixtures: a real dashboard (uvicorn on a free loopback port),
real worker processes, the test redis-server, and headless Chromium.

Nothing here is skipped: a missing Chromium or front-end install fails the
tests (bin/test installs both)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from queueadmin.core import embedded
from tests.engine_helpers import TEST_PROCESSORS, WorkerProcs

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "screenshots"
ADMIN = ("admin", "admin-pass-1")
# bin/run's server options (uvloop, httptools, sans-I/O WebSockets without deflate)
UVICORN_FLAGS = ["--loop", "uvloop", "--http", "httptools", "--ws", "websockets-sansio",
                 "--ws-per-message-deflate", "false", "--lifespan", "off", "--no-proxy-headers",
                 "--timeout-graceful-shutdown", "5"]


# Playwright's screenshots apply styles of their own (an empty <style>; caret
# hiding on the focused element), which the Content-Security-Policy (style-src
# 'self') refuses; Chromium names each refused style by its hash. Any style
# of ours would have another hash and still fail the test.
PLAYWRIGHT_STYLE_HASHES = ("'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",  # ""
                           "'sha256-LCYO6aZgIIKUnjcSr4gFsHQ6Y4vrxnN7Ev5la8a4W4Y='")  # caret-color: transparent


def playwrights_own_style(text: str) -> bool:
    return "Content Security Policy" in text and any(h in text for h in PLAYWRIGHT_STYLE_HASHES)


def _env(redis_url: str, db: Path) -> dict:
    return {**os.environ, "REDIS_URL": redis_url, "DATABASE_PATH": str(db), "PYTHONUNBUFFERED": "1",
            "QUEUEADMIN_EXTRA_PROCESSORS": json.dumps(TEST_PROCESSORS), "DJANGO_DEBUG": "0",
            "QUEUEADMIN_HEARTBEAT_SECONDS": "0.2", "QUEUEADMIN_DEAD_AFTER_SECONDS": "1.5",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost"}


@pytest.fixture(scope="session")
def browser_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("browserdb") / "db.sqlite3"
    env = {**os.environ, "DATABASE_PATH": str(db)}
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    code = ("from django.contrib.auth.models import User; "
            f"User.objects.create_superuser({ADMIN[0]!r}, 'admin@example.com', {ADMIN[1]!r})")
    subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=env, check=True)
    return db


@pytest.fixture
def dashboard(redis_url, browser_db, tmp_path):
    """uvicorn serving the dashboard on 127.0.0.1:<free port>, started as bin/run
    starts it; yields its base URL."""
    if not (ROOT / "var" / "frontend" / "dist" / "htmx.min.js").exists():
        subprocess.run(["bash", str(ROOT / "bin" / "frontend")], cwd=ROOT, check=True)
    port = embedded.free_port()
    log = open(tmp_path / "uvicorn.log", "wb")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "uvicorn"), "--host", "127.0.0.1", "--port", str(port),
                             *UVICORN_FLAGS, "queueadmin.asgi:application"], cwd=ROOT,
                            env=_env(redis_url, browser_db), stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(base + "/accounts/login/", timeout=1).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("uvicorn did not start:\n" + (tmp_path / "uvicorn.log").read_text())
            time.sleep(0.1)
    yield base
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def worker_procs(redis_url, browser_db, tmp_path):
    procs = WorkerProcs(redis_url, browser_db, tmp_path)
    yield procs
    procs.stop_all()


@pytest.fixture(scope="session")
def chromium():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install it (apt-get install -y chromium); browser tests never skip")
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                 args=["--headless", "--no-sandbox", "--disable-gpu",
                                       "--disable-background-networking"])
    yield browser
    browser.close()
    pw.stop()


def sign_in(pg, dashboard: str) -> None:
    """Log `pg` in as the admin through the login form and land on the overview."""
    pg.goto("/accounts/login/")
    pg.fill("#id_username", ADMIN[0])
    pg.fill("#id_password", ADMIN[1])
    pg.click("button[type=submit]")
    pg.wait_for_url(dashboard + "/")


@pytest.fixture
def page(chromium, dashboard):
    context = chromium.new_context(viewport={"width": 1440, "height": 900}, base_url=dashboard)
    pg = context.new_page()
    pg.errors = []
    pg.on("pageerror", lambda exc: pg.errors.append(str(exc)))
    pg.on("console", lambda msg: pg.errors.append(msg.text) if msg.type == "error"
          and not msg.text.startswith("Failed to load resource") and not playwrights_own_style(msg.text) else None)
    pg.on("response", lambda r: pg.errors.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)
    sign_in(pg, dashboard)
    yield pg
    context.close()


def shot(pg, name: str, full_page: bool = True) -> Path:
    SHOTS.mkdir(exist_ok=True)
    path = SHOTS / f"{name}.png"
    pg.screenshot(path=str(path), full_page=full_page)
    return path


SUBMIT_SNIPPET = """
import json, sys
from queueadmin.core import services
specs = json.loads(sys.stdin.read())
ids = [services.submit(s.pop("queue"), s.pop("processor"), s.pop("items"), **s).id for s in specs]
print("IDS=" + json.dumps(ids))
"""


@pytest.fixture
def submit_many(redis_url, browser_db):
    """Submit requests the way producers do (recorded in the dashboard's
    database too), in one subprocess: submit_many([{queue, processor, items, ...}])."""

    def run(specs: list[dict]) -> list[str]:
        out = subprocess.run([sys.executable, "manage.py", "shell", "-c", SUBMIT_SNIPPET], cwd=ROOT,
                             env=_env(redis_url, browser_db), input=json.dumps(specs), capture_output=True,
                             text=True, check=True)
        line = next(x for x in out.stdout.splitlines() if x.startswith("IDS="))
        return json.loads(line[4:])

    return run
