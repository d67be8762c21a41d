"""Redis trouble never kills a worker (issue 10, part 4), with real worker
processes against a redis-server of the test's own: a full server
(maxmemory, noeviction) refuses every write for a while, then has room
again; the workers ride it out and finish every accepted request."""
import time

import pytest
import redis as redis_lib

from queueadmin.core import embedded
from queueadmin.core.engine.client.queue_client import QueueClient
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.store.connection import connect
from tests.engine_helpers import WorkerProcs, wait_for
from tests.engine.test_crash import assert_exactly_one_result_per_item

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@pytest.fixture
def own_redis(tmp_path):
    port = embedded.free_port()
    proc = embedded.start(port, tmp_path / "redis", appendonly=False, log=tmp_path / "redis.log")
    yield f"redis://127.0.0.1:{port}/0"
    embedded.stop(proc)


def test_workers_survive_a_full_redis_and_finish_after_memory_is_raised(own_redis, worker_db, tmp_path):
    r = connect(own_redis)
    qc = QueueClient(r, prefix="qa")
    qc.define_queue("default", QueueConfig())
    sub = qc.submit("default", "sleep", [0.02] * 200, concurrency=4)
    procs = WorkerProcs(own_redis, worker_db, tmp_path)
    try:
        workers = [procs.start("default", 1), procs.start("default", 2)]
        wait_for(lambda: qc.status(sub.id)["done"] >= 20, 30, message="work under way")
        used = int(r.info("memory")["used_memory"])
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", max(1, used - 200_000))  # full: every write that may grow is refused
        with pytest.raises(redis_lib.exceptions.OutOfMemoryError):
            r.set("probe", "x" * 1000)
        time.sleep(4)  # acks, heartbeats and claims all refused meanwhile
        assert all(w.poll() is None for w in workers), procs.logs()
        assert qc.status(sub.id)["state"] != "completed"
        r.config_set("maxmemory", 0)
        wait_for(lambda: qc.status(sub.id)["state"] == "completed", 60, message="completion after the outage")
        assert_exactly_one_result_per_item(qc, sub.id, 200)
        assert qc.status(sub.id)["done"] == 200
        assert all(w.poll() is None for w in workers), procs.logs()
        assert "Redis is out of memory (maxmemory reached)" in procs.logs()  # one human line, not Lua
    finally:
        procs.stop_all()
        r.close()


def test_a_worker_behind_a_silent_network_notices_and_recovers(own_redis, worker_db, tmp_path):
    """The proxy stops forwarding without closing (a partition): the worker's
    socket timeout fires within seconds (no hanging on TCP keepalive), it
    backs off and, once the network is back, finishes the request."""
    from tests.tcp_proxy import TcpProxy

    port = int(own_redis.rsplit(":", 1)[1].split("/")[0])
    proxy = TcpProxy(port)
    r = connect(own_redis)
    qc = QueueClient(r, prefix="qa")
    qc.define_queue("default", QueueConfig())
    sub = qc.submit("default", "sleep", [0.05] * 100, concurrency=2)
    procs = WorkerProcs(proxy.url(), worker_db, tmp_path)
    try:
        worker = procs.start("default", 1)
        wait_for(lambda: qc.status(sub.id)["done"] >= 10, 30, message="work under way")
        proxy.freeze()
        frozen_at = time.monotonic()
        wait_for(lambda: "did not answer in time" in procs.logs(), 20, message="the worker to notice the silence")
        assert time.monotonic() - frozen_at < 15
        proxy.thaw()
        wait_for(lambda: qc.status(sub.id)["state"] == "completed", 60, message="completion after the partition")
        assert_exactly_one_result_per_item(qc, sub.id, 100)
        assert worker.poll() is None, procs.logs()
    finally:
        procs.stop_all()
        proxy.close()
        r.close()
