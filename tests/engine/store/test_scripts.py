"""The store's typed script calls (core/engine/store/*_slot.py): one per Lua
script, the only place its keys and arguments are ordered, each returning
named results, now or on a round trip (trip.py)."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import redis

from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.store import SLOTS, Store
from queueadmin.core.engine.store.queue_slot import Claimed, EnqueueCode, Enqueued, Handoff, Moved, Ticked
from queueadmin.core.engine.store.request_slot import Acked, Added, Retried, TakeKind, TakeTerms, Took
from queueadmin.core.engine.store.scripts import Scripts
from queueadmin.core.engine.store.scripts import Code, Scripts, ScriptError
from tests.engine_helpers import burst

ROOT = Path(__file__).resolve().parents[3]
LUA = ROOT / "lua"
NAME = re.compile(r"^(?P<name>[a-z_]+)-(?P<fixed>\d+)(?:\+(?P<per>\d+)n)?\.lua$")
SCRIPTS = {m["name"]: (int(m["fixed"]), int(m["per"] or 0)) for p in LUA.glob("[!_]*.lua") if (m := NAME.match(p.name))}
TERMS = TakeTerms("w1", 60_000, 3, 60_000, "")


def typed_calls() -> dict[str, list[str]]:
    """Script name -> the slot classes that have a method of that name."""
    found: dict[str, list[str]] = {}
    for cls in SLOTS:
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_"):
                found.setdefault(name, []).append(cls.__name__)
    return found


def test_every_script_has_exactly_one_typed_call_and_every_typed_call_a_script():
    found = typed_calls()
    assert len(SCRIPTS) == len(list(LUA.glob("[!_]*.lua")))  # every file is named name-N[+Pn].lua
    for name in SCRIPTS:
        assert found.get(name, []) and len(found[name]) == 1, (name, found.get(name))
    assert set(found) <= set(SCRIPTS), set(found) - set(SCRIPTS)


# each typed call with arguments of every kind it takes: `n` groups of keys where a script takes groups
SAMPLES = {
    "ack": lambda s, t, n: s.request.ack("r1", "w1", 1000, "", ["1-0", 0, "done", "{}", 0, ""], trip=t),
    "ack_lean": lambda s, t, n: s.queue.ack_lean("q", "w1", 1000, "", [(f"r{j}", ["1-0", 0, "done", "{}", 0, ""])
                                                                         for j in range(n)], trip=t),
    "add": lambda s, t, n: s.request.add("r1", ['"x"'], finalize=True, trip=t),
    "adjust": lambda s, t, n: s.queue.adjust("q", "r1", priority=60, trip=t),
    "adopt": lambda s, t, n: s.queue.adopt("q", "r1", made_for="w2", worker="w1", lease_ms=1000, rested="", trip=t),
    "cancel": lambda s, t, n: s.request.cancel("r1", 1000, "", trip=t),
    "cancel_one": lambda s, t, n: s.queue.cancel_one("q", "r1", 1000, "", trip=t),
    "create": lambda s, t, n: s.request.create("r1", {"id": "r1"}, ['"x"'], trip=t),
    "cycle": lambda s, t, n: s.queue.cycle("q", "w1", 1000, 1, aging=False, live_workers=1, least_share=1, lacks="",
                                           releases=["r1#1", "return", 0], trip=t),
    "discard": lambda s, t, n: s.request.discard("r1", ["1-0"], trip=t),
    "enqueue": lambda s, t, n: s.queue.enqueue("q", "r1", priority=50, concurrency=1, dedup_key="", delay_ms=0,
                                               tokens=1, far=False, rate_spec="", group="g", trip=t),
    "extend_item": lambda s, t, n: s.request.extend_item("r1", "1-0", "w1", 1000, trip=t),
    "extend_token": lambda s, t, n: s.queue.extend_token("q", "r1#1", "w1", 1000, trip=t),
    "history_add": lambda s, t, n: s.history.history_add("q:q", 29_000_000, "d=1", 60, 60, trip=t),
    "holders": lambda s, t, n: s.request.holders("r1", trip=t),
    "item": lambda s, t, n: s.request.item("r1", "1-0", trip=t),
    "periodic_claim": lambda s, t, n: s.periodic.periodic_claim(10, 1000, "tok", trip=t),
    "periodic_define": lambda s, t, n: s.periodic.periodic_define("p", "{}", "||UTC", 0, trip=t),
    "periodic_done": lambda s, t, n: s.periodic.periodic_done("p", "tok", 0, "", trip=t),
    "periodic_repair": lambda s, t, n: s.periodic.periodic_repair([("p", "{}", 0)], trip=t),
    "promoted": lambda s, t, n: s.request.promoted("r1", trip=t),
    "reseal_field": lambda s, t, n: s.request.reseal_field("r1", "results", "0", "old", "new", trip=t),
    "reseal_stream": lambda s, t, n: s.request.reseal_stream("r1", 1, "1-0", ["1-0", "sealed"], trip=t),
    "release_worker": lambda s, t, n: s.queue.release_worker("q", "w1", trip=t),
    "requeue": lambda s, t, n: s.request.requeue("r1", ["1-0"], trip=t),
    "rest": lambda s, t, n: s.queue.rest("q", "w1", True, trip=t),
    "retire": lambda s, t, n: s.queue.retire("q", "r1", "", trip=t),
    "retry": lambda s, t, n: s.request.retry("r1", "", ["1-0"], trip=t),
    "sched_move": lambda s, t, n: s.queue.sched_move("q", [("r1", 0)], trip=t),
    "submit_one": lambda s, t, n: s.queue.submit_one("q", "r1", {"id": "r1"}, '"x"', priority=50, concurrency=1,
                                                     dedup_key="", delay_ms=0, expires_ms=0, rate_spec="",
                                                     lease_ms=1000, max_attempts=3, retention_ms=1000, channel="",
                                                     trip=t),
    "take": lambda s, t, n: s.request.take("r1", TERMS, 1, trip=t),
    "take_lean": lambda s, t, n: s.queue.take_lean("q", TERMS, [(f"r{j}", f"r{j}#1") for j in range(n)], trip=t),
    "tick": lambda s, t, n: s.queue.tick("q", 10, 0, trip=t),
    "unpark": lambda s, t, n: s.queue.unpark("q", "r1", trip=t),
    "untake": lambda s, t, n: s.request.untake("r1", "w1", ["1-0", 1], trip=t),
    "webhook_add": lambda s, t, n: s.webhooks.webhook_add("d1", "r1", 1000, ["url", "x"], trip=t),
    "webhook_adopt": lambda s, t, n: s.webhooks.webhook_adopt("d1", "t1", "host:80", 1000, trip=t),
    "webhook_claim": lambda s, t, n: s.webhooks.webhook_claim(1000, 10, trip=t),
    "webhook_done": lambda s, t, n: s.webhooks.webhook_done("d1", "r1", deadline=0, attempt="{}", state="failed",
                                                            next_at_ms=0, keep_ms=1000, log_max=5, trip=t),
    "webhook_queue": lambda s, t, n: s.webhooks.webhook_queue("d1", "r1", "t1", "host:80", 1000, ["url", "x"],
                                                              trip=t),
    "webhook_sent": lambda s, t, n: s.webhooks.webhook_sent("d1", "r1", "t1", deadline=0, attempt="{}",
                                                            state="failed", next_at_ms=0, keep_ms=1000, log_max=5,
                                                            news="none", penalty_ms=(1, 2), trip=t),
    "webhook_take": lambda s, t, n: s.webhooks.webhook_take("t1", 1000, trip=t),
}


class Recording(Scripts):
    """A registry that records each call put on a pipeline instead of checking it."""

    def __init__(self, redis_client):
        super().__init__(redis_client)
        self.calls = []

    def _check_keys(self, name, keys):
        self.calls.append((name, list(keys)))


def test_each_typed_call_runs_its_own_script_with_the_key_count_its_file_name_says(r):
    store = Store(r)
    store.scripts = Recording(r)
    for slot in (store.queue, store.request, store.periodic, store.webhooks, store.history):
        slot.scripts = store.scripts
    assert set(SAMPLES) == set(SCRIPTS)
    for name, call in SAMPLES.items():
        fixed, per = SCRIPTS[name]
        for n in ((1, 2) if per else (0,)):
            store.scripts.calls.clear()
            answer = call(store, store.trip(), n)
            assert answer.__class__.__name__ == "Answer", name  # on a trip: read once it ran
            assert [c[0] for c in store.scripts.calls] == [name], (name, store.scripts.calls)
            assert len(store.scripts.calls[0][1]) == fixed + per * n, (name, n, store.scripts.calls[0][1])


def test_the_registry_refuses_a_call_with_the_wrong_number_of_keys(r):
    with pytest.raises(TypeError, match="takes 13 keys"):
        Scripts(r).call("retire", ["only", "two"], [])


def test_a_request_goes_through_the_typed_calls_with_named_answers(qc):
    store, qk = qc.store, qc.keys.queue("default")
    meta = {"id": "r1", "queue": "default", "processor": "echo", "priority": 50, "concurrency": 2, "state": "queued",
            "dedup_key": ""}
    assert store.request.create("r1", meta, ['"a"', '"b"']) == 2
    assert store.queue.enqueue("default", "r1", priority=50, concurrency=2, dedup_key="", delay_ms=0, tokens=2,
                               far=False, rate_spec="") == Enqueued(EnqueueCode.QUEUED, "r1")
    claimed = store.queue.cycle("default", "w1", 60_000, 2, aging=False, live_workers=1, least_share=1, lacks="",
                                releases=[])
    assert claimed == Claimed(0, ["r1#1", "r1#2"])
    took = store.request.take("r1", TakeTerms("w1", 60_000, 3, 60_000, ""), 2)
    assert isinstance(took, Took) and took.kind == TakeKind.ALL_GIVEN and took.processor == "echo"
    assert (took.priority, took.lean, took.time_limit, took.given()) == (50, False, "", 2)
    (e1, i1, p1, a1), (e2, i2, p2, a2) = took.items()
    assert (int(i1), p1, int(a1), int(i2), p2, int(a2)) == (0, '"a"', 1, 1, '"b"', 1)
    assert store.request.item("r1", e1)["consumer"] == "w1"
    assert store.request.holders("r1") == [{"name": "w1", "pending": 2}]
    assert store.request.extend_item("r1", e1, "w1", 1000) is True
    assert store.request.extend_item("r1", e1, "someone else", 1000) is False  # NOT_HELD
    assert store.queue.extend_token("default", "r1#1", "w1", 1000) is True
    outcomes = [e1, 0, "done", '{"status":"done"}', 0, "", e2, 1, "done", '{"status":"done"}', 0, ""]
    assert store.request.ack("r1", "w1", 60_000, "", outcomes) == Acked(True, "completed", 2, "")
    assert store.queue.retire("default", "r1") is True and store.queue.retire("default", "r1") is False
    assert store.request.take("r1", TakeTerms("w1", 60_000, 3, 60_000, ""), 1).kind == TakeKind.FINISHED
    assert store.request.take("gone", TakeTerms("w1", 60_000, 3, 60_000, ""), 1) is None  # NOT_FOUND
    assert qc.redis.zcard(qk.tokens) == 0 and qc.status("r1")["state"] == "completed"


def test_refusals_raise_with_their_code_now_and_when_read_from_a_trip(qc):
    sub = qc.submit("default", "echo", ["a", "b"], dedup=False)
    store = qc.store
    with pytest.raises(ScriptError) as refused:
        store.request.create(sub.id, {"id": sub.id}, ['"x"'])
    assert refused.value.code == Code.EXISTS
    assert store.request.cancel(sub.id, 1000, "") == 1  # a request of two items never waits unindexed
    trip = store.trip()
    again = store.request.cancel(sub.id, 1000, "", trip=trip)
    added = store.request.add(sub.id, ['"c"'], trip=trip)
    trip.run()  # the trip itself went through: each call's refusal is its own
    for answer, code in ((again, Code.FINISHED), (added, Code.FINISHED)):
        with pytest.raises(ScriptError) as refused:
            answer.value
        assert refused.value.code == code
    assert store.queue.adjust("default", sub.id, priority=10) == (50, 10)  # still registered: the old values
    assert store.queue.retire("default", sub.id) is True
    with pytest.raises(ScriptError) as refused:
        store.queue.adjust("default", sub.id, priority=10)  # retired: not registered
    assert refused.value.code == Code.NOT_FOUND


def test_a_trip_mixes_commands_and_script_calls_and_each_reads_its_own_answer(qc):
    qc.define_queue("other", QueueConfig())
    a = qc.submit("default", "echo", ["a"], dedup=False, priority=70)
    b = qc.submit("other", "echo", ["b", "c"], dedup=False)
    store, trip = qc.store, qc.store.trip()
    trip.pipe.zcard(qc.keys.queue("default").tokens)
    waiting = trip.answer()
    claim_b = store.queue.cycle("other", "w1", 60_000, 5, aging=False, live_workers=1, least_share=1, lacks="",
                                releases=[], trip=trip)
    trip.pipe.hget(qc.keys.request(b.id).meta, "total")
    total = trip.answer(int)
    claim_a = store.queue.cycle("default", "w1", 60_000, 5, aging=False, live_workers=1, least_share=1, lacks="",
                                releases=[], trip=trip)
    assert len(trip) == 4 and trip.results is None
    trip.run()
    assert (waiting.value, total.value) == (1, 2)
    assert claim_a.value == Claimed(0, [f"{a.id}#1"])
    assert claim_b.value.wait_ms == 0 and sorted(claim_b.value.tokens) == [f"{b.id}#1", f"{b.id}#2"]


def test_every_script_is_loaded_when_the_scripts_are_made(r):
    """A worker's start loads them all (in one round trip on one server)."""
    r.script_flush()
    made = Scripts(r)
    shas = [made._scripts[name].sha for name in made.names()]
    assert len(shas) == len(SCRIPTS) and all(r.script_exists(*shas))


def test_a_trip_loads_its_scripts_again_after_a_script_flush(qc, r):
    sub = qc.submit("default", "echo", ["a", "b"], dedup=False)
    r.script_flush()
    trip = qc.store.trip()
    claimed = qc.store.queue.cycle("default", "w1", 60_000, 2, aging=False, live_workers=1, least_share=1, lacks="",
                                   releases=[], trip=trip)
    trip.pipe.ping()
    pong = trip.answer()
    trip.run()
    assert len(claimed.value.tokens) == 2 and pong.value is True


def test_a_trip_that_fails_raises_and_answers_nothing(qc, monkeypatch):
    trip = qc.store.trip()
    answer = qc.store.queue.tick("default", 10, 0, trip=trip)
    monkeypatch.setattr(qc.store.scripts, "execute", lambda pipe: (_ for _ in ()).throw(redis.ConnectionError("gone")))
    with pytest.raises(redis.ConnectionError):
        trip.run()
    with pytest.raises(TypeError):  # not answered: there is nothing to read
        answer.value


def test_named_answers_of_the_upkeep_and_handoff_scripts(qc):
    qk = qc.keys.queue("default")
    assert qc.store.queue.tick("default", 10, 0) == Ticked([], 0, 0, 0)
    assert qc.store.queue.rest("default", "w1", True) == []  # going in: no handoffs
    qc.redis.hset(qk.can, "w1", "\necho\n")
    sub = qc.submit("default", "echo", ["x"], dedup=False)  # handed to the resting worker
    (value,) = [v for v in qc.redis.lrange(qk.wake, 0, -1) if v.startswith("[")]
    handoff = Handoff.parse(value)
    assert (handoff.worker, handoff.rid) == ("w1", sub.id) and handoff.took.given() == 1
    assert handoff.took.lean and handoff.rested
    (back,) = qc.store.queue.rest("default", "w1", False)  # woke for something else: it holds the handoff
    assert back == handoff
    assert qc.store.queue.sched_move("default", [("nope", 0)]) == [Moved.NOT_REGISTERED]


def test_no_module_outside_the_store_calls_a_script_by_name():
    call = re.compile(r"""\b(?:pipe|call|run|execute|evalsha|script|scripts)\s*\(\s*(?:[\w.]+\s*,\s*)?["']([a-z_]+)["']""")
    offenders = []
    for path in (ROOT / "core").rglob("*.py"):
        if "store" in path.relative_to(ROOT).parts:
            continue
        for m in call.finditer(path.read_text()):
            if m[1] in SCRIPTS:
                offenders.append(f"{path.relative_to(ROOT)}: {m[0]}")
    assert not offenders, offenders


def test_added_and_retried_answers_are_named(qc):
    s = qc.begin("default", "echo")
    assert qc.store.request.add(s.id, ['"a"']) == Added(1, False)
    assert qc.store.request.add(s.id, [], finalize=True) == Added(1, False)  # its item is not done yet
    failed = qc.submit("fast", "fail", ["x", "y"], dedup=False)
    burst(qc, ["fast"])
    assert qc.status(failed.id)["state"] == "failed"
    assert qc.store.request.retry(failed.id, "", None) == Retried(2, True)  # a failed request reopens


def test_scripts_reach_redis_without_comments_and_keep_their_line_numbers(r, tmp_path):
    """Comments and indentation are left out of what Redis loads; a string
    holding "--" is kept, and an error names the line it has with its comments
    (the include's three lines and its blank one before it)."""
    (tmp_path / "_h.lua").write_text("--[[ a helper\n  over lines ]]\nlocal function twice(x) return x * 2 end\n")
    (tmp_path / "boom-1.lua").write_text(
        "--[[\nKEYS[1] a key\n]]\n--@include _h.lua\n"
        "local s = 'a -- b' .. \"--[[c]]\"  -- this goes\n"
        "if ARGV[1] == 'x' then\n    return s .. twice(1)\nend\n"
        "return redis.call('NOPE')  -- line 12 once included\n")
    loaded = Scripts(r, lua_dir=tmp_path)
    text = loaded._scripts["boom"].script
    assert "this goes" not in text and "a helper" not in text and "    return" not in text
    assert text.count("\n") == 12
    assert loaded.call("boom", ["k"], ["x"]) == "a -- b--[[c]]2"
    with pytest.raises(redis.ResponseError, match=r"user_script:12\b|@user_script: 12"):
        loaded.call("boom", ["k"], ["y"])


def test_every_script_loads_at_well_under_its_source_size(r):
    """What a worker sends at its start, and Redis keeps in used_memory."""
    made = Scripts(r)
    sent = sum(len(made._scripts[name].script) for name in made.names())
    source = 0
    for path in LUA.glob("[!_]*.lua"):
        text = path.read_text()
        source += len(text) + sum(len((LUA / inc).read_text()) - len(f"--@include {inc}")
                                  for inc in re.findall(r"^--@include (_[a-z_]+\.lua)$", text, re.M))
    assert sent < 0.6 * source


def test_a_script_carries_only_the_helpers_it_calls(r, tmp_path):
    """A helper nothing calls, and one only it called, are left out (their
    lines blank); one called from a kept helper stays, as does a one-line one."""
    (tmp_path / "_h.lua").write_text(
        "local function inc(x) return x + 1 end -- the end of a line\n"
        "local function twice(x)  -- used by unused only\n  if x then return x * 2 end\n  return 0\nend\n"
        "local function unused(x)\n  return twice(x)\nend\n"
        "local function plus_two(x)\n  return inc(inc(x))\nend\n"
        "local function ping(x) return pong(x) end\nlocal function pong(x) return ping(x) end\n")
    (tmp_path / "calc-0.lua").write_text("--@include _h.lua\nreturn plus_two(tonumber(ARGV[1]))\n")
    loaded = Scripts(r, lua_dir=tmp_path)
    text = loaded._scripts["calc"].script
    assert "twice" not in text and "unused" not in text and "plus_two" in text and "function inc" in text
    assert "ping" not in text  # two helpers that only name each other are not reached
    assert text.count("\n") == 15  # thirteen of the helpers', their file's last line break, and two of its own
    assert loaded.call("calc", [], [40]) == 42


def test_every_script_loads_and_keeps_every_helper_it_names(r):
    """The pruned text of each script compiles, and each helper it still
    names is still defined in it."""
    made = Scripts(r)
    for path in LUA.glob("[!_]*.lua"):
        text = made._scripts[NAME.match(path.name)["name"]].script
        included = re.findall(r"^--@include (_[a-z_]+\.lua)$", path.read_text(), re.M)
        helpers = {h for inc in included for h in re.findall(r"^local function (\w+)\(", (LUA / inc).read_text(), re.M)}
        left_out = helpers - set(re.findall(r"^local function (\w+)\(", text, re.M))
        assert len(left_out) < len(helpers) or not helpers, path.name  # scripts include what they use
        for helper in left_out:
            assert not re.search(rf"\b{helper}\s*\(", text), f"{path.name} calls {helper} without defining it"
    shas = [made._scripts[name].sha for name in made.names()]
    assert all(r.script_exists(*shas))
