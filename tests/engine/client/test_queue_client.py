"""The engine's building blocks: the script registry, submission, results,
de-duplication (semantics 6), and the one-slot rule (semantics 10)."""
import re
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from queueadmin.core.engine.store import scripts as scripts_mod
from queueadmin.core.engine.client.queue_client import QueueError
from queueadmin.core.engine.config import QueueConfig
from tests.engine_helpers import burst

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)

LUA = Path(scripts_mod.LUA_DIR)


def test_every_script_has_a_header_naming_its_keys_and_output():
    for path in LUA.glob("[!_]*.lua"):
        text = path.read_text()
        m = re.search(r"-(\d+)(?:\+(\d+)n)?\.lua$", path.name)
        nkeys, per = int(m[1]), int(m[2] or 0)
        assert text.startswith("--[["), path.name
        header = text.split("]]", 1)[0]
        assert "Output:" in header, path.name
        for i in range(1, nkeys + 1):
            assert f"KEYS[{i}]" in header or f"KEYS[1..{nkeys}]" in header, (path.name, i)
        if per:  # n groups of `per` keys, each named: KEYS[...{per}j+1..{per}j+{per}]
            assert f"{per}j+1.." in header and f"{per}j+{per}]" in header, path.name
        else:
            assert f"KEYS[{nkeys + 1}]" not in text, path.name


def test_scripts_never_build_key_names():
    for path in LUA.glob("*.lua"):
        body = re.sub(r"--\[\[.*?\]\]", "", path.read_text(), flags=re.S)
        assert "qa:" not in body and "{r:" not in body and "{q:" not in body, path.name


def test_include_is_resolved_and_registry_checks_key_counts(r):
    s = scripts_mod.Scripts(r)
    assert "cycle" in s.names() and "_common" not in s.names()
    assert "--@include" not in scripts_mod.resolve(LUA / "cycle-18.lua")
    with pytest.raises(TypeError):
        s("cycle", ["only-one-key"], [])


def test_scripts_reload_after_script_flush(qc, r):
    sub = qc.submit("default", "echo", ["a"])
    r.script_flush()
    burst(qc)
    assert qc.status(sub.id)["state"] == "completed"


def test_every_script_call_stays_in_one_slot(qc, monkeypatch):
    seen = []
    original = scripts_mod.Scripts.call  # every call made now goes through it, every pipelined one through pipe
    original_pipe = scripts_mod.Scripts.pipe

    def checked(self, name, keys, args, client=None):
        seen.append(name)
        assert len({key_slot(k.encode()) for k in keys}) <= 1, (name, keys)
        return original(self, name, keys, args, client)

    def checked_pipe(self, pipe, name, keys, args):
        seen.append(name)
        assert len({key_slot(k.encode()) for k in keys}) <= 1, (name, keys)
        return original_pipe(self, pipe, name, keys, args)

    monkeypatch.setattr(scripts_mod.Scripts, "call", checked)
    monkeypatch.setattr(scripts_mod.Scripts, "pipe", checked_pipe)
    qc.define_queue("q2", QueueConfig(backoff_seconds=0.01, max_attempts=1))
    a = qc.submit("default", "echo", list(range(5)), concurrency=2)
    b = qc.submit("q2", "fail", ["x"])
    s = qc.begin("default", "echo")
    qc.add(s.id, ["y"])
    qc.set_priority(a.id, 60)
    qc.set_concurrency(a.id, 3)
    qc.submit("default", "echo", ["later"], delay=0.05)
    qc.submit("default", "not_here", ["z", "zz"])  # given back untouched (untake) by a worker that lacks it
    burst(qc, ["default", "q2"])
    qc.retry_dead(b.id)
    qc.finalize(s.id)
    burst(qc, ["default", "q2"])
    for name in ("create", "add", "enqueue", "cycle", "take", "ack", "tick", "retire", "adjust",
                 "retry", "unpark", "untake", "history_add"):
        assert name in seen, name


def test_submit_and_results_in_index_order(qc):
    sub = qc.submit("default", "uppercase", ["b", "a", "c"])
    assert not sub.duplicate
    st = qc.status(sub.id)
    assert (st["state"], st["total"], st["done"]) == ("queued", 3, 0)
    burst(qc)
    results = list(qc.results(sub.id))
    assert [x["index"] for x in results] == [0, 1, 2]
    assert [x["result"] for x in results] == ["B", "A", "C"]
    assert all(x["status"] == "done" and x["attempts"] == 1 and x["worker"] for x in results)
    assert all(x["finished_at"] >= x["started_at"] for x in results)
    st = qc.status(sub.id)
    assert (st["state"], st["done"], st["failed"]) == ("completed", 3, 0)


def test_large_request_is_chunked(qc):
    items = [f"item {i}" for i in range(5001)]
    sub = qc.submit("default", "echo", items, concurrency=50)
    st = qc.status(sub.id)
    assert st["total"] == 5001 and st["finalized"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(queue="nope"), "unknown queue"),
    (dict(processor="nope"), "unknown processor"),
    (dict(priority=100), "priority"),
    (dict(priority=-1), "priority"),
    (dict(concurrency=0), "concurrency"),
    (dict(items=[]), "at least one item"),
    (dict(delay=-1), "delay"),
])
def test_bad_submissions_are_refused_with_a_message(qc, kwargs, message):
    qc.processors = {"echo"}
    args = dict(queue="default", processor="echo", items=["x"])
    args.update(kwargs)
    with pytest.raises(QueueError, match=message):
        qc.submit(args.pop("queue"), args.pop("processor"), args.pop("items"), **args)


# -- semantics 6: de-duplication ---------------------------------------------

def test_duplicate_submission_returns_the_pending_request(qc, r):
    first = qc.submit("default", "echo", ["a", "b"])
    again = qc.submit("default", "echo", ["a", "b"])
    assert again.duplicate and again.id == first.id
    other = qc.submit("default", "echo", ["a", "c"])
    assert not other.duplicate and other.id != first.id
    # the refused copy left nothing behind
    assert not r.exists(qc.keys.request(again.id + "x").meta)
    assert len([k for k in r.scan_iter("qa:{r:*}:meta")]) == 2


def test_explicit_dedup_key_and_a_new_request_after_completion(qc):
    a = qc.submit("default", "echo", ["1"], dedup_key="nightly")
    b = qc.submit("default", "echo", ["2"], dedup_key="nightly")
    assert b.duplicate and b.id == a.id
    burst(qc)
    c = qc.submit("default", "echo", ["2"], dedup_key="nightly")
    assert not c.duplicate and c.id != a.id


def test_dedup_can_be_turned_off(qc):
    a = qc.submit("default", "echo", ["same"], dedup=False)
    b = qc.submit("default", "echo", ["same"], dedup=False)
    assert a.id != b.id and not b.duplicate


def test_duplicate_of_a_scheduled_request(qc):
    a = qc.submit("default", "echo", ["x"], delay=60)
    b = qc.submit("default", "echo", ["x"], delay=60)
    assert a.scheduled and b.duplicate and b.id == a.id


# -- streaming submission ----------------------------------------------------

def test_streamed_request_runs_items_as_they_arrive(qc):
    s = qc.begin("default", "uppercase", concurrency=2)
    qc.add(s.id, ["a", "b"])
    burst(qc)
    st = qc.status(s.id)
    assert (st["state"], st["done"], st["finalized"]) == ("running", 2, False)
    qc.add(s.id, ["c"])
    qc.finalize(s.id)
    burst(qc)
    assert qc.status(s.id)["state"] == "completed"
    assert [x["result"] for x in qc.results(s.id)] == ["A", "B", "C"]
    with pytest.raises(QueueError, match="finished"):
        qc.add(s.id, ["d"])


def test_finalizing_an_empty_streamed_request_completes_it(qc):
    s = qc.begin("default", "echo")
    qc.finalize(s.id)
    assert qc.status(s.id)["state"] == "completed"


def test_a_submission_that_fails_part_way_leaves_nothing_behind(qc):
    """Redis refuses the last step of a submission (here: the queue's wake
    list is a string, so registering fails after the request was created and
    given its tokens): the caller gets the error and no half-made request
    stays behind."""
    qk = qc.keys.queue("default")
    qc.redis.set(qk.wake, "not a list")
    before = set(qc.redis.keys("*"))
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        qc.submit("default", "echo", ["a", "b"], dedup_key="k1")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        qc.begin("default", "echo")
    assert set(qc.redis.keys("*")) - {qk.seq} == before  # only the token order counter moved on
    assert qc.redis.zcard(qk.tokens) == 0 and qc.redis.hlen(qk.reqs) == 0
    qc.redis.delete(qk.wake)
    assert not qc.submit("default", "echo", ["a"], dedup_key="k1").duplicate  # its de-dup key was let go
