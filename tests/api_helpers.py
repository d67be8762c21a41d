"""Helpers of the API tests (tests/test_api*.py): users and tokens, a small
client that sends raw bodies, a burst worker, and a real uvicorn server."""
from __future__ import annotations

import json
import socket
import threading
import time

from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.test import Client

from queueadmin.core import conf
from queueadmin.core import embedded, services
from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.worker import Worker
from queueadmin.core.models import ApiToken

BASE = {"queue": "default", "processor": "uppercase", "items": ["a"]}


def make_user(username, *, act=False, superuser=False, active=True):
    user = User.objects.create_user(username, password="pw", is_staff=True, is_superuser=superuser,
                                    is_active=active)
    if act:
        user.user_permissions.add(Permission.objects.get(codename="change_requestrecord"))
    return user


def token_for(username, scopes=None, *, act=True):
    return ApiToken.issue(make_user(username, act=act), "tests", scopes=scopes)[1]


class Api:
    def __init__(self, key, client=None):
        self.key, self.client = key, client or Client()

    def call(self, method, url, body=None, raw=None, **headers):
        if self.key is not None:
            headers.setdefault("Authorization", f"Bearer {self.key}")
        data = raw if raw is not None else (json.dumps(body) if body is not None else "")
        return self.client.generic(method, url, data=data, content_type="application/json", headers=headers)

    def get(self, url, **kw):
        return self.call("GET", url, **kw)

    def post(self, url, body=None, **kw):
        return self.call("POST", url, body, **kw)


def results(api, rid) -> list[dict]:
    response = api.get(f"/api/v1/requests/{rid}/results")
    assert response.status_code == 200, response.content
    # split on newlines only: str.splitlines would also split inside text at U+2028 and the like
    return [json.loads(line) for line in b"".join(response.streaming_content).split(b"\n") if line]


def run_burst(queues=("default",)):
    worker = Worker(services.engine(), list(queues), Processors(conf.processors()), burst=True,
                    heartbeat=0.2, install_signals=False, on_finish=services.record)
    worker.work()


class ServerThread:
    """uvicorn serving queueadmin.asgi.application on a free loopback port, in a thread."""

    def __init__(self):
        import uvicorn

        from queueadmin.asgi import application

        self.port = embedded.free_port()
        config = uvicorn.Config(application, host="127.0.0.1", port=self.port, lifespan="off", log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)


def read_response(sock: socket.socket, timeout: float = 5.0) -> tuple[int, dict, bytes]:
    """Status, headers and body of one HTTP/1.1 response (Content-Length framed)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", len(body)))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body
