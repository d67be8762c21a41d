"""Fixtures shared by every test, in one place: a real redis-server on a
free loopback port (started once per session, flushed between tests) and
engine clients on it; the database (SQLite, or PostgreSQL); and the Django
side's: the engine with the database's queues (`engine`, `eng`), signed-in
staff (`staff`), a view-only user (`viewer`), an API token and a client
using it (`key`, `api`), fast password hashing (`fast_passwords`), migrated
databases for subprocesses (`worker_db`, `cli_db`). A module (or folder
conftest) that needs a variant defines its own under the same name."""
from __future__ import annotations

import os

import pytest
import redis as redis_lib

from queueadmin.core import embedded
from queueadmin.core.engine.client.queue_client import QueueClient
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.store.connection import connect

PREFIX = "qa"


@pytest.fixture(autouse=True)
def no_tracing_hook():
    """The app's ready() installs OpenTelemetry's hook when the package is there
    (the test requirements have it; a test that changes INSTALLED_APPS runs it
    again): each test starts without; tests/engine/test_otel.py installs its own."""
    from queueadmin.core.engine.integrations import otel

    otel.uninstall()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    port = embedded.free_port()
    data = tmp_path_factory.mktemp("redis")
    proc = embedded.start(port, data, log=data / "redis.log")
    server = {"port": port, "url": f"redis://127.0.0.1:{port}/0", "proc": proc, "dir": data}
    yield server
    embedded.stop(server["proc"])


# -- backends: one server, or a Redis Cluster ---------------------------------
# Tests of a module that declares BACKENDS (e.g. ("single", "cluster")) run on
# each: a single server and a local cluster (3 masters + 3 replicas), through
# the `backend` parameter of `redis_url`. QUEUEADMIN_TEST_BACKENDS=single (or
# cluster) runs one of them only.


def pytest_generate_tests(metafunc):
    if "backend" not in metafunc.fixturenames:
        return
    if any(m.args and "backend" in str(m.args[0]) for m in metafunc.definition.iter_markers("parametrize")):
        return  # the test chooses its backends itself
    declared = getattr(metafunc.module, "BACKENDS", None)
    if declared:
        wanted = os.environ.get("QUEUEADMIN_TEST_BACKENDS", "single,cluster").split(",")
        metafunc.parametrize("backend", [b for b in declared if b in wanted], indirect=True)


@pytest.fixture
def backend(request):
    """"single" (the session's redis-server) or "cluster" (the session's cluster).
    Outside the modules above: QUEUEADMIN_TEST_BACKEND=cluster runs them on the cluster."""
    return getattr(request, "param", os.environ.get("QUEUEADMIN_TEST_BACKEND", "single"))


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    """A real cluster of six redis-server processes, started on first use."""
    from tests.cluster_harness import LocalCluster

    cluster = LocalCluster(tmp_path_factory.mktemp("cluster")).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def redis_url(backend, request, settings):
    """A flushed server (or cluster); Django settings and cached clients point at it."""
    from queueadmin.core import services

    if backend == "cluster":
        cluster = request.getfixturevalue("redis_cluster")
        cluster.wait_ok()
        cluster.flushall()
        url = cluster.url
    else:
        server = request.getfixturevalue("redis_server")
        r = redis_lib.Redis.from_url(server["url"])
        r.flushall()
        r.close()
        url = server["url"]
    settings.REDIS_URL = url
    os.environ["REDIS_URL"] = url
    services.reset()
    yield url
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


# -- the database: SQLite, or PostgreSQL ------------------------------------------
# QUEUEADMIN_TEST_DB=postgres puts the test database on a PostgreSQL cluster the
# session starts itself (tests/pg_harness.py: initdb in a temp dir, a free
# loopback port), as it starts redis-server; bin/test runs the database-backed
# modules a second time that way.
TEST_DB = os.environ.get("QUEUEADMIN_TEST_DB", "sqlite")


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL cluster of this session (any test may ask for one)."""
    from tests.pg_harness import LocalPostgres

    pg = LocalPostgres().start()
    yield pg
    pg.stop()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, request):
    """pytest-django's hook before it creates the test database."""
    if TEST_DB == "postgres":
        from django.conf import settings

        _use_database(request.getfixturevalue("postgres").settings("queueadmin"))
        # one machine, though its database is PostgreSQL: the keys it generated are no warning (checks W011)
        settings.QUEUEADMIN_GENERATED_SECRETS = []
    elif TEST_DB != "sqlite":
        raise pytest.UsageError(f"QUEUEADMIN_TEST_DB={TEST_DB!r}: use sqlite or postgres")


def _use_database(config: dict) -> None:
    """Point Django's default database at `config` (before the test database exists)."""
    from django.conf import settings
    from django.db import connections

    db = settings.DATABASES["default"]
    db.clear()
    db.update(config)
    connections.close_all()
    try:
        del connections["default"]
    except AttributeError:  # not opened in this thread yet
        pass
    connections.__dict__.pop("settings", None)  # re-applies Django's defaults to the new entry


def pytest_report_header(config):
    return f"database: {'PostgreSQL (tests/pg_harness.py)' if TEST_DB == 'postgres' else 'SQLite'}"


def migrated_db(tmp_path_factory, name: str):
    """A migrated SQLite file for subprocesses (workers, commands)."""
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path_factory.mktemp(name) / "db.sqlite3"
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, str(root / "manage.py"), "migrate", "--noinput", "-v", "0"], cwd=root,
                   env={**os.environ, "DATABASE_PATH": str(path)}, check=True)
    return path


@pytest.fixture(scope="session")
def worker_db(tmp_path_factory):
    """A migrated SQLite file for worker subprocesses (they record history)."""
    return migrated_db(tmp_path_factory, "workerdb")


@pytest.fixture(scope="module")
def cli_db(tmp_path_factory):
    """A migrated SQLite file of this module's own, for the commands it runs in subprocesses."""
    return migrated_db(tmp_path_factory, "clidb")


@pytest.fixture
def workers(redis_url, worker_db, tmp_path):
    """Start real worker processes; all are stopped at the end of the test."""
    from tests.engine_helpers import WorkerProcs

    procs = WorkerProcs(redis_url, worker_db, tmp_path)
    yield procs
    procs.stop_all()


# -- the Django side: the engine with the database's queues, users, API tokens -------


@pytest.fixture
def engine(redis_url):
    """The Django side's engine client on a flushed Redis, with the database's queues pushed to it."""
    from queueadmin.core import services

    services.sync_queues()
    return services.engine()


@pytest.fixture
def eng(engine):
    """`engine`, by the name the dashboard's and the live pages' tests use."""
    return engine


@pytest.fixture
def staff(client, eng):
    """The test client, signed in as a superuser ("boss")."""
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_superuser("boss", "boss@example.com", "pw"))
    return client


@pytest.fixture
def viewer(db):
    """A staff user who may view, not act."""
    from django.contrib.auth.models import User

    return User.objects.create_user("viewer", password="pw", is_staff=True)


@pytest.fixture
def fast_passwords(settings):
    """MD5 password hashing: users are made by the dozen."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def key(db):
    """An API key of a staff user ("producer") who may act, with the default scopes."""
    from tests.api_helpers import token_for

    return token_for("producer")


@pytest.fixture
def api(key):
    """A client of the JSON API with `key`."""
    from tests.api_helpers import Api

    return Api(key)
