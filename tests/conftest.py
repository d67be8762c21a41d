"""Fixtures shared by every test: a real redis-server on a free loopback port
(started once per session, flushed between tests) and engine clients on it."""
from __future__ import annotations

import os

import pytest
import redis as redis_lib

from core import embedded
from core.engine.client import QueueClient
from core.engine.config import QueueConfig
from core.engine.connection import connect

PREFIX = "qa"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    port = embedded.free_port()
    data = tmp_path_factory.mktemp("redis")
    proc = embedded.start(port, data, log=data / "redis.log")
    server = {"port": port, "url": f"redis://127.0.0.1:{port}/0", "proc": proc, "dir": data}
    yield server
    embedded.stop(server["proc"])


@pytest.fixture
def redis_url(redis_server, settings):
    """A flushed server; Django settings and cached clients point at it."""
    from core import services

    r = redis_lib.Redis.from_url(redis_server["url"])
    r.flushall()
    r.close()
    settings.REDIS_URL = redis_server["url"]
    os.environ["REDIS_URL"] = redis_server["url"]
    services.reset()
    yield redis_server["url"]
    services.reset()


@pytest.fixture
def r(redis_url):
    client = connect(redis_url)
    yield client
    client.close()


@pytest.fixture
def qc(r):
    """An engine client with the `default` queue and a fast-redelivery `fast` queue."""
    client = QueueClient(r, prefix=PREFIX)
    client.define_queue("default", QueueConfig())
    client.define_queue("fast", QueueConfig(lease_seconds=1.0, backoff_seconds=0.05, max_attempts=3))
    return client


@pytest.fixture(scope="session")
def worker_db(tmp_path_factory):
    """A migrated SQLite file for worker subprocesses (they record history)."""
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path_factory.mktemp("workerdb") / "db.sqlite3"
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, str(root / "manage.py"), "migrate", "--noinput", "-v", "0"], cwd=root,
                   env={**os.environ, "DATABASE_PATH": str(path)}, check=True)
    return path


@pytest.fixture
def workers(redis_url, worker_db, tmp_path):
    """Start real worker processes; all are stopped at the end of the test."""
    from tests.engine_helpers import WorkerProcs

    procs = WorkerProcs(redis_url, worker_db, tmp_path)
    yield procs
    procs.stop_all()
