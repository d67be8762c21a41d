"""The readers of the dashboard and the engine see a lean one-item request
(its item in a small hash, not a stream: lua/_request.lua) as they see any
request: its item page, the in-flight page (held by a dead worker), stop,
recovery of a dead worker's item, dead letters with retry. Both backends."""
from __future__ import annotations

import json
import time

import pytest

from queueadmin.core import queries, services
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core import operations as ops
from tests.engine_helpers import burst, dispatch_is_empty, wait_for

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


@pytest.fixture
def eng(redis_url):
    services.sync_queues()
    client = services.engine()
    client.define_queue("default", QueueConfig(lease_seconds=30))
    client.define_queue("dl", QueueConfig(lease_seconds=30, backoff_seconds=0.0, max_attempts=1))
    return client


def ghost_take(eng, queue, worker="ghost:1:aa"):
    """A worker that claims a token and takes its item, then dies (never registered)."""
    qk = eng.keys.queue(queue)
    cfg = eng.queue_config(queue)
    (_, token) = eng.scripts("cycle", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked, qk.wake,
                                        qk.config, qk.lastserved, qk.rate, qk.ratelog, qk.needs,
                             qk.groups, qk.glimits, qk.gheld, qk.packed, qk.lane, qk.tomb],
                             [worker, cfg.lease_ms, 1, 0, 1])
    rid = token.rpartition("#")[0]
    got = eng.scripts("take", eng.keys.request(rid).all(),
                      [worker, cfg.lease_ms, cfg.max_attempts, cfg.retention_ms, "", 1])
    return rid, got[7]  # the entry id


def register_dead(eng, wid):
    """A worker in the registry whose heartbeats stopped an hour ago."""
    beat = int(time.time() * 1000) - 3_600_000
    eng.redis.zadd(eng.keys.workers, {wid: beat})
    eng.redis.hset(eng.keys.worker(wid), mapping={"host": "elsewhere", "pid": 1, "heartbeat": beat, "started": beat,
                                                  "queues": "default", "current": "[]", "processed": 0, "failed": 0})


def test_a_one_item_request_is_lean_and_small(eng):
    sub = eng.submit("default", "echo", ["x" * 12], dedup=False)
    rk = eng.keys.request(sub.id)
    # waiting, it is packed: its meta hash alone, with the payload (engine/store/packed.py)
    assert [eng.redis.exists(k) for k in rk.all()] == [1, 0, 0, 0, 0]
    used = eng.redis.memory_usage(rk.meta)
    assert used < 260, used  # meta and item hashes took 448 (a stream with its group alone about 1,400)
    st = eng.status(sub.id)
    assert (st["id"], st["state"], st["total"], st["done"], st["finalized"], st["dedup_key"]) == (
        sub.id, "queued", 1, 0, True, "")
    (item,) = eng.items(sub.id)
    assert (item["index"], item["payload"], item["status"]) == (0, "x" * 12, "pending")
    rid, entry = ghost_take(eng, "default")
    assert rid == sub.id and entry == item["entry"]
    assert eng.redis.type(rk.items) == "hash"  # taken: unpacked into the lean layout, no stream
    assert eng.status(sub.id)["state"] == "running"
    assert "p" not in eng.redis.hgetall(rk.meta)
    big = eng.submit("default", "echo", ["a", "b"], dedup=False)
    assert eng.redis.type(eng.keys.request(big.id).items) == "stream"  # more than one item: the general path


def test_item_page_in_flight_page_stop_and_recovery_of_a_lean_item(eng):
    sub = eng.submit("default", "uppercase", ["hi"])
    rid, entry = ghost_take(eng, "default")
    assert rid == sub.id
    page = queries.request_items(rid)
    (row,) = page["rows"]
    assert (page["length"], row["entry"], row["payload"], row["status"]) == (1, entry, "hi", "running")
    assert (row["worker"], row["attempts"]) == ("ghost:1:aa", 1)
    assert queries.request_items(rid, after=entry)["rows"] == []
    inflight = queries.inflight_page(None, False, 1, 50)
    (r,) = inflight["rows"]
    assert (r["request"], r["entry"], r["index"], r["payload"], r["worker"]) == (rid, entry, 0, "hi", "ghost:1:aa")
    assert r["dead_worker"] and r["stuck"] and inflight["stuck_count"] == 1
    assert queries.inflight_pairs() == [(rid, entry)]
    assert eng.stop_item(rid, entry) is True
    assert eng.status(rid)["in_flight"] == 1
    # the dashboard's "requeue" of a dead worker's item: the worker is recovered (its token
    # given back) and the item is due at once, not after its 30 s lease
    register_dead(eng, "ghost:1:aa")
    assert ops.requeue([(rid, entry)]) == 1
    assert not eng.redis.hget(eng.keys.queue("default").held, f"{rid}#1")
    eng.redis.delete(eng.keys.stops)
    wait_for(lambda: burst(eng) and eng.status(rid)["state"] == "completed", 20)
    (rec,) = list(eng.results(rid))
    assert (rec["status"], rec["result"], rec["attempts"]) == ("done", "HI", 2)
    (row,) = queries.request_items(rid)["rows"]
    assert (row["status"], row["worker"]) == ("done", rec["worker"])
    assert eng.stop_item(rid, entry) is False
    assert dispatch_is_empty(eng)


def test_dead_letter_page_and_retry_of_a_lean_item(eng):
    sub = eng.submit("dl", "fail", ["bad"])
    burst(eng, ["dl"])
    assert eng.status(sub.id)["state"] == "failed"
    (row,) = queries.dead_page(request=sub.id)["rows"]
    assert (row["request"], row["index"], row["payload"]) == (sub.id, 0, "bad")
    (dead,) = eng.dead_letters(sub.id)
    assert (dead["index"], dead["payload"], dead["entry"]) == (0, "bad", row["entry"])
    assert queries.dead_pairs(request=sub.id) == [(sub.id, row["entry"])]
    assert eng.retry_dead(sub.id, [row["entry"]]) == 1
    assert eng.status(sub.id)["state"] == "queued" and queries.dead_page(request=sub.id)["rows"] == []
    burst(eng, ["dl"])
    st = eng.status(sub.id)
    assert (st["state"], st["failed"], st["dead"]) == ("failed", 1, 1)  # failed again, dead again
    assert eng.discard_dead(sub.id) == 1
    (rec,) = list(eng.results(sub.id))
    assert rec.get("discarded") is True
    assert json.loads(json.dumps(rec))["status"] == "failed"
