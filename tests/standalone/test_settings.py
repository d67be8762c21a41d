"""Secure by default (issue 10): DEBUG off, a generated private secret key,
`check --deploy` clean under the documented production environment, static
files without DEBUG, no debug page on a 404, password validators, login
throttling, and a strict Content-Security-Policy that every rendered page
keeps (no inline scripts, handlers or style attributes)."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import password_validation
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from queueadmin.core import services

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable

PRODUCTION = {
    "DJANGO_SECURE": "1",
    "DJANGO_ALLOWED_HOSTS": "queues.example.com",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://queues.example.com",
    "DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
}


def clean_env(tmp_path, **extra):
    """This machine's environment without any DJANGO_* setting, data in tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_") and k != "DATABASE_URL"}
    env.update(QUEUEADMIN_VAR=str(tmp_path), DATABASE_PATH=str(tmp_path / "db.sqlite3"),
               DJANGO_SETTINGS_MODULE="queueadmin.settings", **extra)
    return env


def run_py(code, env, timeout=60):
    done = subprocess.run([PY, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


SETTINGS = "from django.conf import settings; print(settings.{})"


# -- defaults -------------------------------------------------------------------------------


def test_debug_is_off_unless_asked_for(tmp_path):
    assert run_py(SETTINGS.format("DEBUG"), clean_env(tmp_path)) == "False"
    assert run_py(SETTINGS.format("DEBUG"), clean_env(tmp_path, DJANGO_DEBUG="0")) == "False"
    assert run_py(SETTINGS.format("DEBUG"), clean_env(tmp_path, DJANGO_DEBUG="1")) == "True"


def test_metrics_key_comes_from_the_environment(tmp_path):
    code = "import django; django.setup(); from django.test import RequestFactory; from queueadmin.core import auth; " \
           "print(auth.metrics_allowed(RequestFactory().get('/', headers={'Authorization': 'Bearer s3cr3t-scraper-key'})))"
    assert run_py(code, clean_env(tmp_path, QUEUEADMIN_METRICS_TOKEN="s3cr3t-scraper-key")) == "True"
    code = "import django; django.setup(); from queueadmin.core import conf; print(repr(conf.get('METRICS_TOKEN')))"
    assert run_py(code, clean_env(tmp_path)) == "''"  # unset: no shared key at all


def test_secret_key_is_generated_private_and_reused(tmp_path):
    key = run_py(SETTINGS.format("SECRET_KEY"), clean_env(tmp_path))
    path = tmp_path / "secret_key"
    assert path.read_text().strip() == key and len(key) >= 50
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert run_py(SETTINGS.format("SECRET_KEY"), clean_env(tmp_path)) == key
    assert "dev-only" not in (ROOT / "queueadmin" / "settings.py").read_text()
    given = run_py(SETTINGS.format("SECRET_KEY"), clean_env(tmp_path / "other", DJANGO_SECRET_KEY="k" * 60))
    assert given == "k" * 60 and not (tmp_path / "other" / "secret_key").exists()


def test_processes_starting_together_share_one_key(tmp_path):
    env = clean_env(tmp_path)
    procs = [subprocess.Popen([PY, "-c", SETTINGS.format("SECRET_KEY")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(4)]
    keys = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert keys == {(tmp_path / "secret_key").read_text().strip()}
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".secret_key")]  # no temp files left


def test_default_process_shows_no_debug_page_and_serves_static_files(tmp_path, settings):
    """A plain process (no DJANGO_* at all), as `bin/run` starts it: an
    anonymous 404 is the plain page, and WhiteNoise serves the statics."""
    code = """
import json, django
django.setup()
from django.test import Client
c = Client()
r = c.get("/no/such/page/")
out = {"status": r.status_code, "body": r.content.decode()}
for path in ("/static/queueadmin/app.css", "/static/queueadmin/app.js", "/static/queueadmin/vendor/htmx.min.js",
             "/static/admin/css/base.css"):
    out[path] = c.get(path).status_code
print(json.dumps(out))
"""
    (tmp_path / "frontend").symlink_to(Path(settings.FRONTEND_DIR).parent)  # htmx from bin/frontend
    out = json.loads(run_py(code, clean_env(tmp_path)))
    assert out["status"] == 404
    assert "URLconf" not in out["body"] and "Traceback" not in out["body"] and "DEBUG = True" not in out["body"]
    assert "Not found" in out["body"]
    assert {k: v for k, v in out.items() if k.startswith("/static/")} == {
        "/static/queueadmin/app.css": 200, "/static/queueadmin/app.js": 200, "/static/queueadmin/vendor/htmx.min.js": 200,
        "/static/admin/css/base.css": 200}


def test_static_files_are_served_in_tests_too(client):
    for path in ("/static/queueadmin/app.css", "/static/queueadmin/vendor/htmx.min.js"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert b"".join(response.streaming_content) if response.streaming else response.content


# -- production configuration ----------------------------------------------------------------


def deploy_check(tmp_path, **env):
    return subprocess.run([PY, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                          env=clean_env(tmp_path, **env), capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_check_deploy_is_clean_under_the_production_environment(tmp_path):
    done = deploy_check(tmp_path, **PRODUCTION)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout
    # and the check does look: the laptop defaults are reported
    laptop = deploy_check(tmp_path)
    assert laptop.returncode != 0 and "SECURE_HSTS_SECONDS" in laptop.stdout + laptop.stderr


def test_production_settings(tmp_path):
    code = """
import json
from django.conf import settings as s
print(json.dumps({k: getattr(s, k, None) for k in ("DEBUG", "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS",
    "SECURE_PROXY_SSL_HEADER", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS", "SESSION_COOKIE_HTTPONLY", "SESSION_COOKIE_SAMESITE", "CSRF_COOKIE_SAMESITE")}))
"""
    got = json.loads(run_py(code, clean_env(tmp_path, **PRODUCTION)))
    assert got == {"DEBUG": False, "ALLOWED_HOSTS": ["queues.example.com"],
                   "CSRF_TRUSTED_ORIGINS": ["https://queues.example.com"],
                   "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"], "SESSION_COOKIE_SECURE": True,
                   "CSRF_COOKIE_SECURE": True, "SECURE_SSL_REDIRECT": True, "SECURE_HSTS_SECONDS": 31536000,
                   "SESSION_COOKIE_HTTPONLY": True, "SESSION_COOKIE_SAMESITE": "Lax", "CSRF_COOKIE_SAMESITE": "Lax"}


@pytest.mark.django_db
def test_production_cookies_are_secure_and_https_is_enforced(client, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_HSTS_SECONDS = 31536000
    assert client.get("/accounts/login/").status_code == 301  # plain http: to https
    assert client.get("/healthz").status_code == 200  # a load balancer's probe needs no TLS
    page = client.get("/accounts/login/", headers={"X-Forwarded-Proto": "https"})
    assert page.status_code == 200 and page["Strict-Transport-Security"].startswith("max-age=31536000")
    csrf = page.cookies["csrftoken"]
    assert csrf["secure"] and csrf["samesite"] == "Lax"
    User.objects.create_user("alice", password="a long passphrase 42")
    login = client.post("/accounts/login/", {"username": "alice", "password": "a long passphrase 42"},
                        headers={"X-Forwarded-Proto": "https", "X-CSRFToken": csrf.value})
    session = login.cookies["sessionid"]
    assert session["secure"] and session["httponly"] and session["samesite"] == "Lax"


# -- passwords and logins ----------------------------------------------------------------------


def test_password_validators_are_on():
    for weak in ("admin", "password123", "12345678901"):
        with pytest.raises(ValidationError):
            password_validation.validate_password(weak)
    password_validation.validate_password("correct horse battery staple")


@pytest.mark.django_db
def test_login_is_locked_after_repeated_failures(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    limit = settings.AXES_FAILURE_LIMIT
    assert 3 <= limit <= 10
    User.objects.create_user("alice", password="the right passphrase", is_staff=True)
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    for _ in range(limit - 1):
        response = attacker.post("/accounts/login/", {"username": "alice", "password": "guess"})
        assert response.status_code == 200 and "didn't match" in response.content.decode()
    locked = attacker.post("/accounts/login/", {"username": "alice", "password": "guess"})
    assert locked.status_code == 429 and "Too many failed logins" in locked.content.decode()
    # The right password from that address is refused too while the lock lasts...
    again = attacker.post("/accounts/login/", {"username": "alice", "password": "the right passphrase"})
    assert again.status_code == 429 and "_auth_user_id" not in attacker.session
    # ...the admin's login form counts the same...
    admin_login = attacker.post("/admin/login/", {"username": "alice", "password": "the right passphrase"})
    assert admin_login.status_code == 429
    # ...while alice, from her own address, still signs in.
    alice = Client(REMOTE_ADDR="198.51.100.7")
    assert alice.post("/accounts/login/", {"username": "alice", "password": "the right passphrase"}).status_code == 302
    assert alice.session["_auth_user_id"] == str(User.objects.get(username="alice").pk)


# -- Content-Security-Policy ---------------------------------------------------------------------

# a <script> without src runs inline, unless it is a JSON data block (never executed)
INLINE_SCRIPT = re.compile(r"""<script\b(?![^>]*\bsrc=)(?![^>]*\btype=["']application/json["'])[^>]*>""", re.I)
INLINE_HANDLER = re.compile(r"""<[^>]*\s(on[a-z]+|hx-on[:\w-]*)\s*=""", re.I)
STYLE_ATTR = re.compile(r"""<[^>]*\sstyle\s*=""", re.I)
STYLE_TAG = re.compile(r"<style\b", re.I)


def csp_of(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {d.split()[0]: d.split()[1:] for d in header.split(";") if d.strip()}


def assert_strict(response, where):
    assert response.status_code in (200, 404, 429), (where, response.status_code)
    policy = csp_of(response)
    assert policy["default-src"] == ["'self'"], where
    for directive in ("script-src", "style-src"):
        assert policy[directive] == ["'self'"], (where, directive)
    html = response.content.decode()
    for pattern in (INLINE_SCRIPT, INLINE_HANDLER, STYLE_ATTR, STYLE_TAG):
        found = pattern.search(html)
        assert found is None, (where, html[max(0, found.start() - 80):found.end() + 80])


def test_templates_have_no_inline_scripts_handlers_or_styles():
    for path in (ROOT / "templates").rglob("*.html"):
        text = path.read_text()
        for pattern in (INLINE_SCRIPT, INLINE_HANDLER, STYLE_ATTR, STYLE_TAG):
            assert not pattern.search(text), (path, pattern.pattern)


@pytest.fixture
def dashboard(client, redis_url, db):
    from tests.engine_helpers import burst

    services.sync_queues()
    eng = services.engine()
    done = services.submit("default", "uppercase", ["<b>x</b>", "y"]).id
    burst(eng, ("default",), on_finish=services.record)
    services.submit("default", "fail", ["boom"])
    burst(eng, ("default",), on_finish=services.record)
    live = services.submit("default", "echo", ["a", "b", "c"]).id
    services.submit("default", "echo", ["later"], delay=3600)
    client.force_login(User.objects.create_superuser("boss", "boss@example.com", "pw"))
    return client, done, live


def test_every_page_has_a_strict_policy_and_keeps_it(dashboard):
    client, done, live = dashboard
    pages = ["overview", "submit", "requests", "inflight", "dead", "scheduled", "workers", "queues"]
    # htmx would inject a <style> for its indicators
    meta = re.search(r"""<meta name="htmx-config" content='([^']*)'>""", client.get("/").content.decode())
    assert meta and json.loads(meta[1])["includeIndicatorStyles"] is False
    assert "style" not in json.loads(meta[1])["attributesToSettle"]  # htmx would copy style attributes
    for name in pages:
        assert_strict(client.get(reverse("queueadmin:" + name)), name)
        assert_strict(client.get(reverse("queueadmin:" + name), headers={"HX-Request": "true"}), f"{name} (htmx)")
    for rid in (done, live):
        assert_strict(client.get(reverse("queueadmin:request_detail", args=[rid])), rid)
    confirm = client.post(reverse("queueadmin:request_bulk"), {"scope": "all", "filter": ""}, headers={"HX-Request": "true"})
    assert "modal" in confirm.content.decode()
    assert_strict(confirm, "confirm dialog")
    page = client.post(reverse("queueadmin:request_cancel", args=[live]))
    assert "modal" in page.content.decode()
    assert_strict(page, "confirm page")
    assert_strict(client.get("/no/such/page/"), "404")
    for url in ("/admin/", "/admin/queueadmin/apitoken/add/", "/admin/queueadmin/queue/", "/admin/auth/user/", "/api/docs"):
        response = client.get(url)
        policy = csp_of(response)
        assert response.status_code == 200 and policy["script-src"] == ["'self'"], url
        assert not INLINE_SCRIPT.search(response.content.decode()), url


def test_login_and_lockout_pages_are_strict(client, db, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    assert_strict(client.get("/accounts/login/"), "login")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        locked = client.post("/accounts/login/", {"username": "x", "password": "y"})
    assert locked.status_code == 429
    assert_strict(locked, "locked out")



# -- the standalone service's first login (bin/run, queueadmin run) ---------------------------------

FIRST_LOGIN = ("import django; django.setup(); from pathlib import Path; from queueadmin.service import Service; "
               "Service(Path('.'), 0, 0, 1).first_login()")


@pytest.mark.slow
def test_bin_run_creates_admin_with_a_random_password_shown_once(tmp_path):
    env = clean_env(tmp_path)
    subprocess.run([PY, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True, timeout=120)
    shell = [PY, "-c", FIRST_LOGIN]
    first = subprocess.run(shell, cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=60).stdout
    password = re.search(r"login admin, password (\S+)", first)[1]
    assert "queueadmin changepassword admin" in first and password != "admin" and len(password) >= 16
    check = (f"from django.contrib.auth import authenticate; from django.contrib.auth.password_validation import "
             f"validate_password; u = authenticate(username='admin', password={password!r}); "
             f"validate_password({password!r}, u); print(u.is_superuser)")
    assert run_py(f"import django; django.setup(); {check}", env) == "True"
    again = subprocess.run(shell, cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=60).stdout
    assert again.strip() == ""  # a later start shows nothing and changes nothing
