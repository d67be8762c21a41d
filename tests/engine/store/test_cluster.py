"""Redis Cluster specifics (the engine's semantics tests run on the cluster
too, see conftest.BOTH_BACKENDS): choosing a cluster by configuration, key
layout and its spread over the masters, blocking on wake lists in several
slots, SCAN and pub/sub across nodes, and WAIT."""
from __future__ import annotations

import asyncio
import collections
import json
import threading
import time

import pytest
import redis as redis_lib
from redis.crc import key_slot

from queueadmin.core.engine.client.queue_client import QueueClient
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.store.connection import Cluster, WaitingRedis, cluster_nodes, connect, pubsub_client
from tests.engine_helpers import Threads, burst

BACKENDS = ("cluster",)  # tests here that use redis_url/r/qc run on the cluster only
pytestmark = pytest.mark.timeout(120)


# -- choosing a cluster ---------------------------------------------------------

def test_a_cluster_url_or_setting_gives_a_cluster_client(redis_url, redis_cluster, settings):
    from queueadmin.core import services

    assert isinstance(services.redis_client(), Cluster)  # REDIS_URL=redis+cluster://...
    one_node = f"redis://127.0.0.1:{redis_cluster.masters()[0]}/0"
    assert not isinstance(connect(one_node), Cluster)
    settings.REDIS_URL, settings.REDIS_CLUSTER = one_node, True
    services.reset()
    client = services.redis_client()
    assert isinstance(client, Cluster) and len(client.get_primaries()) == 3
    assert client.get_node_from_key("x").server_type == "primary"


def test_cluster_urls_list_startup_nodes_and_credentials():
    nodes, options = cluster_nodes("rediss+cluster://u:p%40ss@10.0.0.1:7000,10.0.0.2:7001")
    assert nodes == [("10.0.0.1", 7000), ("10.0.0.2", 7001)]
    assert options == {"username": "u", "password": "p@ss", "ssl": True}
    with pytest.raises(ValueError):
        cluster_nodes("redis+cluster://h:1/3")


# -- key layout ---------------------------------------------------------------

def test_requests_spread_over_all_masters(qc, r):
    """Requests of several items: one-item requests live in their queue's slot."""
    subs = [qc.submit("default", "echo", [i, i]) for i in range(300)]
    per_master = collections.Counter(r.get_node_from_key(qc.keys.request(s.id).meta).name for s in subs)
    print("\nrequests per master:", dict(per_master))
    assert len(per_master) == 3
    assert min(per_master.values()) >= 60  # 100 expected each; 60 is ~5 standard deviations below
    # and the keys really are there: every master holds request keys
    sizes = {n.name: r.dbsize(target_nodes=n) for n in r.get_primaries()}
    assert all(size > 100 for size in sizes.values()), sizes


def test_each_request_and_each_queue_is_one_slot(qc, r):
    sub = qc.submit("default", "echo", [1, 2])
    rk, qk = qc.keys.request(sub.id), qc.keys.queue("default")
    assert len({key_slot(k.encode()) for k in rk.all()}) == 1
    assert len({key_slot(k.encode()) for k in qk.all_dispatch()}) == 1
    one = qc.submit("default", "echo", [1])  # a one-item request: in its queue's slot
    assert {key_slot(k.encode()) for k in qc.keys.request(one.id).all()} == {key_slot(qk.tokens.encode())}


def test_scan_iter_finds_the_keys_of_every_master(qc, r):
    ids = {qc.submit("default", "echo", [i, i]).id for i in range(60)}
    found = {k.split("{r:")[1].split("}")[0] for k in r.scan_iter(match=f"{qc.keys.prefix}:{{r:*}}:meta", count=500)}
    assert found == ids


# -- waiting for work on queues in several slots --------------------------------

def test_blpop_over_wake_lists_in_several_slots_returns_as_soon_as_one_fills(r):
    keys = [f"qa:{{q:{name}}}:wake" for name in ("alpha", "beta", "gamma", "delta")]
    assert len({r.keyslot(k) for k in keys}) == 4
    assert r.blpop(keys, timeout=0.2) is None  # nothing there: times out

    def push():
        time.sleep(0.3)
        r.rpush(keys[2], 1)

    t = threading.Thread(target=push)
    t0 = time.monotonic()
    t.start()
    got = r.blpop(keys, timeout=3)
    t.join()
    assert got == [keys[2], "1"] or tuple(got) == (keys[2], "1")
    assert time.monotonic() - t0 < 0.3 + 4 * Cluster.BLOCK_SLICE + 0.2
    r.rpush(keys[3], 1)
    assert tuple(r.blpop(keys, timeout=1)) == (keys[3], "1")  # already there: found without blocking


def test_a_worker_serves_queues_in_several_slots(qc, r):
    names = ["q-a", "q-b", "q-c"]
    assert len({r.keyslot(qc.keys.queue(n).wake) for n in names}) == 3
    for n in names:
        qc.define_queue(n, QueueConfig())
    subs = [qc.submit(n, "echo", list(range(20))) for n in names]
    with Threads(qc, 2, names):
        pass
    assert [qc.status(s.id)["state"] for s in subs] == ["completed"] * 3


# -- pub/sub ------------------------------------------------------------------

def test_the_relay_subscriber_hears_requests_of_every_master(qc, r, redis_url):
    """The dashboard relay subscribes on one node (pubsub_client); plain
    PUBLISH from a script on any master reaches it."""
    subs = [qc.submit("default", "echo", [i, i]) for i in range(30)]
    masters = {r.get_node_from_key(qc.keys.request(s.id).meta).name for s in subs}
    assert len(masters) == 3

    async def listen():
        client = pubsub_client(redis_url)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(qc.channel)
        ready.set()
        finished = set()
        deadline = time.monotonic() + 30
        while len(finished) < len(subs) and time.monotonic() < deadline:
            msg = await pubsub.get_message(timeout=0.5)
            if msg:
                event = json.loads(msg["data"])
                if event["type"] == "finished":
                    finished.add(event["id"])
        await pubsub.aclose()
        await client.aclose()
        return finished

    ready = threading.Event()
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("ids", asyncio.run(listen())))
    t.start()
    assert ready.wait(10)
    burst(qc)
    t.join(40)
    assert out["ids"] == {s.id for s in subs}


def test_pubsub_client_tries_the_next_node_each_time(redis_cluster):
    ports = {pubsub_client(redis_cluster.url).connection_pool.connection_kwargs["port"] for _ in range(6)}
    assert ports == set(redis_cluster.ports)


# -- WAIT -----------------------------------------------------------------------

def test_with_wait_replicas_a_submission_is_on_the_replica_when_submit_returns(redis_url, redis_cluster):
    client = connect(redis_url, wait_replicas=(1, 2000))
    qc = QueueClient(client)
    qc.define_queue("default", QueueConfig())
    for i in range(20):
        sub = qc.submit("default", "echo", [i])
        master = client.get_node_from_key(qc.keys.request(sub.id).meta).port
        replica = redis_cluster.node(redis_cluster.replica_of(master))
        replica.execute_command("READONLY")
        assert replica.exists(qc.keys.request(sub.id).meta) == 1
        replica.close()
    burst(qc)


def test_wait_without_a_replica_degrades_instead_of_stalling(redis_server, caplog):
    """A server with no replica: the first write waits its timeout, the next
    ones do not wait for a while (there is nothing to wait for)."""
    client = connect(redis_server["url"], wait_replicas=(1, 200))
    assert isinstance(client, WaitingRedis)
    t0 = time.monotonic()
    pipe = client.pipeline(transaction=False)
    pipe.set("qa:wait-test", 1)
    assert pipe.execute() == [True]
    assert time.monotonic() - t0 >= 0.19
    t1 = time.monotonic()
    for _ in range(5):
        pipe = client.pipeline(transaction=False)
        pipe.incr("qa:wait-test")
        pipe.execute()
    assert time.monotonic() - t1 < 0.2
    assert "writing without WAIT" in caplog.text
    client.delete("qa:wait-test")


def test_a_redis_url_with_a_node_down_still_finds_the_cluster(redis_cluster):
    nodes, _ = cluster_nodes(redis_cluster.url)
    url = "redis+cluster://127.0.0.1:1," + ",".join(f"{h}:{p}" for h, p in nodes)  # port 1: nobody there
    client = connect(url)
    assert client.ping()
    client.close()
    with pytest.raises(redis_lib.ConnectionError):
        connect("redis+cluster://127.0.0.1:1")
