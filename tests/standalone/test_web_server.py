"""The standalone web server against slow and greedy clients, and the web
side's smaller leaks (issue 20): a real uvicorn started with the service's
own command line (queueadmin.service.uvicorn_argv) on a data folder of its
own, behind a pretend reverse proxy on 127.0.0.1."""
from __future__ import annotations

import http.client
import io
import logging
import os
import re
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from queueadmin.core import embedded
from queueadmin.core.models import ApiToken
from queueadmin.service import uvicorn_argv
from tests.standalone.test_package import clean_env, wait_http

ROOT = Path(__file__).resolve().parents[2]
HEAD_SECONDS = 1.5


@pytest.fixture(scope="module")
def server(tmp_path_factory, redis_server):
    """uvicorn as `queueadmin run` starts it, trusting X-Forwarded-For from 127.0.0.1."""
    data = tmp_path_factory.mktemp("web")
    env = clean_env(HOME=str(data), QUEUEADMIN_VAR=str(data), REDIS_URL=redis_server["url"],
                    QUEUEADMIN_FORWARDED_ALLOW_IPS="127.0.0.1", QUEUEADMIN_HEADER_TIMEOUT=str(HEAD_SECONDS))
    manage = [sys.executable, "-m", "queueadmin"]
    subprocess.run([*manage, "migrate", "-v", "0"], cwd=ROOT, env=env, check=True, timeout=120)
    subprocess.run([*manage, "shell", "-c", "from django.contrib.auth.models import User; "
                    "User.objects.create_user('alice', password='the right passphrase', is_staff=True)"],
                   cwd=ROOT, env=env, check=True, timeout=120)
    port = embedded.free_port()
    proc = subprocess.Popen(uvicorn_argv(port, env), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
        yield port
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def login(port: int, forwarded_for: str, password: str) -> int:
    """A login POST as a browser behind the proxy at `forwarded_for` makes it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/accounts/login/", headers={"X-Forwarded-For": forwarded_for})
    page = conn.getresponse()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.read().decode())[1]
    cookie = re.search(r"csrftoken=([^;]+)", page.getheader("Set-Cookie"))[1]
    body = f"username=alice&password={password.replace(' ', '+')}&csrfmiddlewaretoken={csrf}"
    conn.request("POST", "/accounts/login/", body=body, headers={
        "X-Forwarded-For": forwarded_for, "Cookie": f"csrftoken={cookie}",
        "Content-Type": "application/x-www-form-urlencoded"})
    answer = conn.getresponse()
    answer.read()
    conn.close()
    return answer.status


@pytest.mark.slow
def test_behind_a_proxy_a_lockout_is_the_guessers_not_everyones(server):
    """Five wrong passwords from one client lock alice out for that client
    only: the others behind the same proxy (one connection address) still
    sign in, because the service takes the client's address from the proxy."""
    for _ in range(5):
        status = login(server, "203.0.113.9", "a wrong guess")
    assert status == 429
    assert login(server, "203.0.113.9", "the right passphrase") == 429
    assert login(server, "198.51.100.7", "the right passphrase") == 302


def raw(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(10)
    return sock


def answer_of(sock: socket.socket) -> bytes:
    """What the server sent until it closed the connection."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


@pytest.mark.slow
def test_slow_and_endless_request_heads_are_cut_off(server):
    """A head sent a byte at a time (slowloris), a connection that sends
    nothing, and a head without end: each is closed, within the head's
    deadline or at its size cap, while others are served meanwhile."""
    slow, idle = raw(server), raw(server)
    started = time.monotonic()
    slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    slow.setblocking(False)
    closed = None
    while time.monotonic() - started < 10 and closed is None:
        try:
            slow.sendall(b"X-Slow-%d: x\r\n" % int(time.monotonic() * 10))
            if slow.recv(65536) is not None:
                closed = time.monotonic() - started
        except BlockingIOError:
            pass
        except OSError:
            closed = time.monotonic() - started
        time.sleep(0.3)
    assert closed is not None and closed < HEAD_SECONDS + 1, closed
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=5)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200  # served meanwhile, and after
    assert answer_of(idle).startswith(b"HTTP/1.1 408 ")
    assert time.monotonic() - started < HEAD_SECONDS + 2
    endless, sent, answer = raw(server), 0, b""
    endless.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    try:  # header lines without end, until the server answers or hangs up
        while sent < 64 * 1024 * 1024 and not select.select([endless], [], [], 0)[0]:
            sent += endless.send(b"X-Big-%d: %s\r\n" % (sent, b"y" * 1000))
        answer = answer_of(endless)
    except OSError:  # reset: it closed with our lines still unread
        pass
    # cut off at its 64 KiB cap: what was sent past it is what the kernel's socket buffers took meanwhile
    # (a few MiB on loopback, depending on the machine), far from the 64 MiB it would send unchecked
    assert sent < 16 * 1024 * 1024, sent
    assert answer in (b"",) or answer.startswith(b"HTTP/1.1 431 "), answer[:100]
    for sock in (slow, idle, endless):
        sock.close()


# -- in process: tokens, the token admin, 500s ---------------------------------------------------


pytest_django_db = pytest.mark.django_db


@pytest_django_db
@pytest.mark.parametrize("storage", ["django.contrib.messages.storage.session.SessionStorage",
                                     "django.contrib.messages.storage.cookie.CookieStorage",
                                     "django.contrib.messages.storage.fallback.FallbackStorage"])
def test_a_new_api_key_and_its_secret_never_travel_in_a_cookie(settings, storage):
    """The key is on the answer to the POST itself, whatever message storage
    the project uses; nothing of it in a cookie or a later page."""
    settings.MESSAGE_STORAGE = storage
    root = User.objects.create_superuser("root", "", "pw")
    client = Client()
    client.force_login(root)
    response = client.post(reverse("admin:queueadmin_apitoken_add"), {"user": root.pk, "name": "ci",
                                                                       "scopes": ["read"]})
    page = response.content.decode()
    key = re.search(r"is (qa_[A-Za-z0-9_-]+) ", page)[1]
    token = ApiToken.objects.get()
    assert response.status_code == 200 and token.webhook_secret in page and "no-store" in response["Cache-Control"]
    for cookie in response.cookies.values():
        assert key not in cookie.value and token.webhook_secret not in cookie.value, cookie.key
    later = client.get(reverse("admin:queueadmin_apitoken_changelist")).content.decode()
    assert key not in later and token.webhook_secret not in later


def test_the_standalone_settings_keep_messages_in_the_session(settings):
    assert settings.MESSAGE_STORAGE == "django.contrib.messages.storage.session.SessionStorage"


@pytest_django_db
def test_the_token_admin_lists_no_usernames_to_staff_who_see_only_their_own():
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_apitoken", "add_apitoken"]))
    ApiToken.issue(User.objects.create_user("zed-private-name", password="pw", is_staff=True), "theirs")
    User.objects.create_user("no-tokens-name", password="pw", is_staff=True)
    ApiToken.issue(staff, "mine", scopes=["read"])
    client = Client()
    client.force_login(staff)
    listing = client.get(reverse("admin:queueadmin_apitoken_changelist")).content.decode()
    assert "mine" in listing and "zed-private-name" not in listing and "no-tokens-name" not in listing
    client.force_login(User.objects.create_superuser("root", "", "pw"))
    listing = client.get(reverse("admin:queueadmin_apitoken_changelist")).content.decode()
    assert "user__id__exact" in listing and "zed-private-name" in listing  # the superuser's filter...
    assert "no-tokens-name" not in listing  # ...names only owners of tokens


@pytest_django_db
def test_a_dashboard_500_writes_its_traceback_to_the_log(monkeypatch, redis_url):
    def broken():
        raise RuntimeError("a page that breaks")

    monkeypatch.setattr("queueadmin.core.views.overview.overview_context", broken)
    handler = logging.getLogger("django.request").handlers[0]  # the console (queueadmin/settings.py LOGGING)
    stream = io.StringIO()
    old = handler.setStream(stream)
    try:
        client = Client(raise_request_exception=False)
        client.force_login(User.objects.create_superuser("root", "", "pw"))
        assert client.get(reverse("queueadmin:overview")).status_code == 500
    finally:
        handler.setStream(old)
    logged = stream.getvalue()
    assert "Internal Server Error: /" in logged and "Traceback" in logged and "a page that breaks" in logged
