"""One dispatch round trip (core/engine/runtime/cycle.py): each section puts
its calls on one pipeline and reads its own answers; a round trip that
fails is sent again whole, and counts once."""
from __future__ import annotations

import json
import time

import pytest
import redis

from queueadmin.core.engine.runtime.item import Ran
from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.worker import Worker
from queueadmin.core.engine.store.trip import Trip
from tests.engine_helpers import BUILTIN

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)


def worker(qc):
    """A worker that is not started: the tests drive its round trips by hand."""
    finished: list[dict] = []
    w = Worker(qc, ["default"], Processors(BUILTIN), install_signals=False, threads=1,
               on_finish_many=finished.extend)
    return w, finished


def run_all(w, items):
    """Items ran (their result: their payload); their outcomes wait for the next round trip."""
    w.outcomes.on_done([Ran(i, result=json.loads(i.payload)) for i in items])
    w._collect()


def test_one_round_trip_acknowledges_both_kinds_of_request_releases_and_counts(qc):
    stream = qc.submit("default", "echo", ["a", "b"], dedup=False, concurrency=2)
    one = qc.submit("default", "echo", ["c"], dedup=False)  # one item: made in the queue's slot
    qk = qc.keys.queue("default")
    w, finished = worker(qc)
    tokens, items = w.claims.cycle("default", 3)
    assert not items and sorted(tokens) == sorted([f"{stream.id}#1", f"{stream.id}#2", f"{one.id}#1"])
    items = w.claims.take("default", tokens)
    assert sorted(i.payload for i in items) == ['"a"', '"b"', '"c"'] and len(w.held) == 3
    run_all(w, items)
    assert len(w.outcomes.acks) == 2  # one per request: `ack` for the stream, `ack_lean` for the other

    assert w.claims.cycle("default", 0) == ([], [])  # claims nothing: carries the outcomes
    assert len(w.held) == 0 and not w.outcomes.acks and not any(w.keeping.releases.values())
    assert [s["id"] for s in finished] == [one.id]  # closed and retired by ack_lean in that round trip
    assert w.outcomes.finishing == {stream.id: ("default", "")}  # closed by its `ack`: to retire
    assert qc.status(stream.id)["state"] == "completed" and qc.redis.hexists(qk.reqs, stream.id)
    minute = int(time.time() // 60)
    assert qc.redis.hget(qc.keys.throughput("default", minute), "done") == "3"  # idle: figures at once

    w.claims.flush()  # the stream request, closed by its `ack`, is retired in the next one
    assert sorted(s["id"] for s in finished) == sorted([one.id, stream.id])
    assert not qc.redis.hexists(qk.reqs, stream.id) and qc.redis.zcard(qk.tokens) == 0
    assert qc.redis.hlen(qk.held) == 0 and [r["result"] for r in qc.results(stream.id)] == ["a", "b"]


def test_a_round_trip_that_fails_is_sent_again_whole_and_counts_once(qc, monkeypatch):
    sub = qc.submit("default", "echo", ["a", "b"], dedup=False, concurrency=2)
    qk = qc.keys.queue("default")
    w, finished = worker(qc)
    tokens, _ = w.claims.cycle("default", 2)
    run_all(w, w.claims.take("default", tokens))
    sent = Trip.run
    monkeypatch.setattr(Trip, "run", lambda self: (_ for _ in ()).throw(redis.ConnectionError("gone")))
    with pytest.raises(redis.ConnectionError):
        w.claims.flush()
    assert len(w.outcomes.acks) == 1 and len(w.held) == 2 and w.claims.pending()  # nothing counts as sent
    assert sorted(w.keeping.releases["default"][0::3]) == sorted(tokens)
    monkeypatch.setattr(Trip, "run", sent)
    w.claims.flush()
    w.claims.flush()
    assert [r["status"] for r in qc.results(sub.id)] == ["done", "done"] and [s["id"] for s in finished] == [sub.id]
    assert qc.redis.hget(qc.keys.stats("default"), "done") == "2"  # figures sent once
    assert qc.redis.zcard(qk.tokens) == 0 and qc.redis.hlen(qk.held) == 0


def test_a_hinted_one_item_request_is_taken_in_the_round_trip_that_claims_its_token(qc):
    sub = qc.submit("default", "echo", ["x"], dedup=False)
    w, _ = worker(qc)
    w.claims.hint("default", sub.id)  # its id woke the worker (a wake marker)
    tokens, items = w.claims.cycle("default", 1, go_on=True)
    assert tokens == [] and [(i.rid, i.payload, i.lean) for i in items] == [(sub.id, '"x"', True)]
    assert w.held.holds(items[0]) and not w.claims.hints


def test_the_best_waiting_section_tells_keeping_what_waits_after_the_claim(qc):
    high = qc.submit("default", "echo", ["a", "b"], dedup=False, priority=70, concurrency=1)
    qc.submit("default", "echo", ["c", "d"], dedup=False, priority=40, concurrency=1)
    w, _ = worker(qc)
    w.pace.ran("default", 0.0001)  # fast items: the round trip looks at the best waiting token
    tokens, _ = w.claims.cycle("default", 1, go_on=True)
    assert tokens == [f"{high.id}#1"]
    assert w.keeping._best_waiting["default"] == 40  # read in the same round trip, after the claim
    qc.set_paused("default", True)
    w.claims.cycle("default", 1, go_on=True)
    assert w.keeping._best_waiting["default"] == 99  # a paused queue keeps nothing


def test_kept_tokens_take_their_next_items_in_the_round_trip_that_acknowledges(qc):
    sub = qc.submit("default", "echo", ["a", "b", "c"], dedup=False, concurrency=1)
    w, _ = worker(qc)
    tokens, _ = w.claims.cycle("default", 1, go_on=True)
    (item,) = w.claims.take("default", tokens)
    w.keeping._may_keep = lambda item, outcome: True  # nothing waits at its priority (keeping.py)
    w.outcomes.on_done([Ran(item, result="A")])
    w._collect()
    assert w.keeping.kept == {"default": [item]} and not w.keeping.releases["default"]
    item.claimed = time.monotonic()  # within its window
    tokens, items = w.claims.cycle("default", None, go_on=True)  # kept only: no claim
    assert tokens == [] and [(i.token, i.payload) for i in items] == [(item.token, '"b"')]
    assert [r["status"] for r in qc.results(sub.id)][:2] == ["done", "pending"]
