"""Redis in trouble, with real servers: one started full (maxmemory below what
it holds, noeviction), a read-only replica, a port nobody listens on, and a
connection through a TCP proxy that goes silent without closing. Commands
print one human line and exit non-zero (reads keep working while writes are
refused), the dashboard answers 503 with a clear page, and a silent server is
noticed within seconds instead of hanging."""
from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis as redis_lib
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from queueadmin.core import embedded, services
from queueadmin.core.engine.store import connection
from queueadmin.core.engine.client.queue_client import QueueClient
from queueadmin.core.engine.errors import describe
from tests.tcp_proxy import TcpProxy

ROOT = Path(__file__).resolve().parents[1]
OOM = "Redis is out of memory (maxmemory reached)"


# -- servers ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trouble_server(tmp_path_factory):
    """A redis-server of this module's own, so filling it up harms no other test."""
    port = embedded.free_port()
    data = tmp_path_factory.mktemp("trouble")
    proc = embedded.start(port, data, appendonly=False, log=data / "redis.log",
                          extra=["--maxmemory-policy", "noeviction"])
    yield {"port": port, "url": f"redis://127.0.0.1:{port}/0", "dir": data}
    embedded.stop(proc)


@pytest.fixture
def full(trouble_server, settings):
    """Point Django at the trouble server; `fill()` makes it refuse writes,
    `relieve()` lifts the limit again."""
    admin = redis_lib.Redis(port=trouble_server["port"])
    admin.config_set("maxmemory", 0)
    admin.flushall()
    settings.REDIS_URL = trouble_server["url"]
    services.reset()

    class Control:
        url = trouble_server["url"]

        @staticmethod
        def fill():
            pipe = admin.pipeline(transaction=False)
            for n in range(200):
                pipe.set(f"filler:{n}", b"x" * 10_000)
            pipe.execute()
            used = int(admin.info("memory")["used_memory"])
            admin.config_set("maxmemory", used - 1_000_000)  # over the limit by about 1 MB
            with pytest.raises(redis_lib.exceptions.OutOfMemoryError):
                admin.set("probe", "x")

        @staticmethod
        def relieve():
            admin.config_set("maxmemory", 0)

    yield Control
    admin.config_set("maxmemory", 0)
    admin.close()
    services.reset()


def manage(*args, url, db, stdin="a\n", timeout=60):
    env = {**os.environ, "REDIS_URL": url, "DATABASE_PATH": str(db)}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def one_line_error(proc, fragment: str) -> str:
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert fragment in lines[0], proc.stderr
    for internal in ("user_script", "Error running script", "of pipeline caused error", "f_"):
        assert internal not in lines[0], lines[0]
    return lines[0]


# -- out of memory: commands -------------------------------------------------------------


@pytest.mark.django_db
def test_commands_when_redis_is_full(full):
    out = io.StringIO()
    call_command("queue_submit", "-", processor="echo", stdin=io.StringIO("before\n"), stdout=out)
    rid = out.getvalue().split()[-1]
    full.fill()
    for options in ({}, {"json": True}):
        with pytest.raises(CommandError) as caught:
            call_command("queue_submit", "-", processor="echo", stdin=io.StringIO('{"a": 1}\n'), **options)
        assert str(caught.value).startswith(OOM) and "script" not in str(caught.value)
    # reads write nothing, so they work while Redis refuses writes
    for args in (("queue_status",), ("queue_status", rid), ("queue_results", rid)):
        out = io.StringIO()
        call_command(*args, stdout=out)
        assert out.getvalue()
    full.relieve()
    call_command("queue_submit", "-", processor="echo", stdin=io.StringIO("x\n"), stdout=io.StringIO())


@pytest.mark.slow
def test_command_processes_when_redis_is_full(full, cli_db):
    """As processes: one line on stderr, exit code 1, no traceback."""
    full.fill()
    one_line_error(manage("queue_submit", "-", "--processor", "echo", url=full.url, db=cli_db, stdin="x\ny\n"), OOM)
    status = manage("queue_status", url=full.url, db=cli_db)
    assert status.returncode == 0 and "queue default" in status.stdout, status.stderr


@pytest.mark.django_db
def test_queue_status_writes_nothing(full):
    services.sync_queues()
    r, config = services.engine().redis, services.engine().keys.queue("default").config
    r.hset(config, "priority", 7)  # differs from the database's row, which a sync would write back
    rid = services.submit("default", "echo", ["a"]).id
    for args in ((), (rid,)):
        call_command("queue_status", *args, stdout=open(os.devnull, "w"))
        call_command("queue_results", rid, stdout=open(os.devnull, "w"))
    assert r.hget(config, "priority") == "7"


# -- out of memory and read-only: the dashboard ---------------------------------------------


@pytest.fixture
def staff(client, db):
    client.force_login(User.objects.create_superuser("boss", "boss@example.com", "pw"))
    return client


def test_dashboard_when_redis_is_full(full, staff):
    services.sync_queues()
    full.fill()
    assert staff.get(reverse("queueadmin:overview")).status_code == 200  # reading still works
    response = staff.post(reverse("queueadmin:submit"), {"queue": "default", "processor": "echo", "items": "keep me\nand me"})
    assert response.status_code == 503
    page = response.content.decode()
    assert OOM in page and "user_script" not in page
    assert "keep me" in page  # the form is kept, to submit again later
    full.relieve()
    assert staff.post(reverse("queueadmin:submit"), {"queue": "default", "processor": "echo",
                                          "items": "keep me"}).status_code == 302


@pytest.fixture
def replica(trouble_server, tmp_path, settings):
    port = embedded.free_port()
    proc = embedded.start(port, tmp_path / "replica", appendonly=False,
                          extra=["--replicaof", "127.0.0.1", str(trouble_server["port"])])
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    services.reset()
    yield settings.REDIS_URL
    services.reset()
    embedded.stop(proc)


@pytest.mark.django_db
def test_read_only_replica(full, replica, staff):
    primary = QueueClient(connection.connect(full.url))
    from queueadmin.core.models import Queue

    for queue in Queue.objects.all():
        primary.define_queue(queue.name, queue.to_config())
    deadline = time.monotonic() + 10
    while not services.engine().queues() and time.monotonic() < deadline:  # replication caught up
        time.sleep(0.05)
    with pytest.raises(CommandError, match="read-only replica"):
        call_command("queue_submit", "-", processor="echo", stdin=io.StringIO("a\n"))
    response = staff.post(reverse("queueadmin:submit"), {"queue": "default", "processor": "echo", "items": "a"})
    assert response.status_code == 503 and "read-only replica" in response.content.decode()


# -- unreachable: every page is a 503 with a clear message, htmx gets a fragment ------------


def test_dashboard_pages_when_redis_is_unreachable(staff, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{embedded.free_port()}/0"  # nobody listens
    services.reset()
    try:
        for name in ("overview", "requests", "inflight", "dead", "scheduled", "workers", "submit"):
            response = staff.get(reverse("queueadmin:" + name))
            if response.status_code == 200:
                continue  # a page served from the database alone
            assert response.status_code == 503, (name, response.status_code)
            assert "cannot reach Redis" in response.content.decode() and b"<html" in response.content
            assert response["Retry-After"]
        response = staff.get(reverse("queueadmin:overview"), headers={"HX-Request": "true"})
        assert response.status_code == 503 and b"<html" not in response.content
        assert "cannot reach Redis" in response.content.decode()
        assert response["HX-Retarget"] == "#main"
        response = staff.get(reverse("queueadmin:overview"), headers={"Accept": "application/json"})
        assert response.status_code == 503 and "cannot reach Redis" in response.json()["error"]
    finally:
        services.reset()


# -- a connection that goes silent --------------------------------------------------------


@pytest.fixture
def proxy(redis_server):
    p = TcpProxy(redis_server["port"])
    yield p
    p.close()


def test_connections_have_a_socket_timeout_and_keepalive(proxy):
    client = connection.connect(proxy.url())
    client.ping()
    conn = client.connection_pool.get_connection()
    try:
        sock = conn._sock
        assert sock.gettimeout() == connection.SOCKET_TIMEOUT
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 5
    finally:
        client.connection_pool.release(conn)
    # the longest blocking call a worker makes stays below the timeout
    started = time.monotonic()
    assert client.blpop(["nothing:here"], timeout=1) is None
    assert time.monotonic() - started < connection.SOCKET_TIMEOUT


@pytest.mark.slow
def test_a_silent_server_is_noticed_within_seconds_and_the_client_recovers(proxy, redis_server):
    qc = QueueClient(connection.connect(proxy.url()))
    qc.redis.ping()
    proxy.freeze()
    started = time.monotonic()
    with pytest.raises(redis_lib.TimeoutError) as caught:
        qc.redis.ping()
    elapsed = time.monotonic() - started
    # one timeout, one retry on a fresh connection, then the error (not 4 timeouts, not forever)
    assert connection.SOCKET_TIMEOUT <= elapsed < 2 * connection.SOCKET_TIMEOUT + 3, elapsed
    assert "did not answer in time" in describe(caught.value)
    proxy.thaw()
    assert qc.redis.ping()


@pytest.mark.slow
def test_a_silent_server_gives_commands_a_one_line_error(proxy, cli_db):
    url = proxy.url(query="socket_timeout=1")
    assert manage("queue_status", url=url, db=cli_db).returncode == 0
    proxy.freeze()
    started = time.monotonic()
    for args in (["queue_status"], ["queue_submit", "-", "--processor", "echo"]):
        one_line_error(manage(*args, url=url, db=cli_db), "did not answer in time")
    assert time.monotonic() - started < 20  # two commands, process start included
    proxy.thaw()


def test_a_submission_through_a_silent_server_fails_quickly(proxy, redis_server):
    qc = QueueClient(connection.connect(proxy.url(query="socket_timeout=1")))
    from queueadmin.core.engine.config import QueueConfig

    qc.define_queue("default", QueueConfig())
    proxy.freeze()
    started = time.monotonic()
    with pytest.raises(redis_lib.TimeoutError):
        qc.submit("default", "echo", ["a"], dedup=False)
    assert time.monotonic() - started < 5
    proxy.thaw()
    assert qc.submit("default", "echo", ["a"], dedup=False).id


# -- the words --------------------------------------------------------------------------------


@pytest.mark.parametrize("exc, words", [
    (redis_lib.exceptions.ResponseError("Error running script (call to f_68d2d1579dacb5a534c1f3c92bb48a209f9f7ad9): "
                                        "@user_script:72: @user_script: 72: -OOM command not allowed when used "
                                        "memory > 'maxmemory'."), OOM),
    (redis_lib.exceptions.BusyLoadingError("Redis is loading the dataset in memory"), "loading its data"),
    (redis_lib.exceptions.ReadOnlyError("You can't write against a read only replica."), "read-only replica"),
    (redis_lib.exceptions.ResponseError("MISCONF Redis is configured to save RDB snapshots, but it's currently "
                                        "unable to persist to disk."), "cannot save to disk"),
    (redis_lib.exceptions.ResponseError("BUSY Redis is busy running a script."), "busy running a long script"),
    (redis_lib.exceptions.ResponseError("Command # 3 (EVALSHA abc 1 k secret item) of pipeline caused error: "
                                        "WRONGTYPE Operation against a key"), "Redis error: WRONGTYPE"),
])
def test_describe_gives_one_human_line(exc, words):
    text = describe(exc)
    assert words in text and "\n" not in text
    assert "user_script" not in text and "secret item" not in text
