"""Hooks (core/engine/hooks.py): headers given at submit reach the item's run
on a real worker, the run is wrapped, outcomes and lease renewals are heard,
and a hook that fails everywhere fails no item."""
import contextlib
import threading

import pytest

from queueadmin.core.engine import hooks
from queueadmin.core.engine.config import QueueConfig
from tests.engine_helpers import burst


class Recorder(hooks.Hook):
    wants_headers = True

    def __init__(self):
        self.seen = []
        self.lock = threading.Lock()

    def _add(self, *entry):
        with self.lock:
            self.seen.append(entry)

    def submitting(self, queue, processor, headers):
        headers["trace"] = f"{queue}/{processor}"

    @contextlib.contextmanager
    def running(self, item):
        self._add("enter", item.rid, dict(item.headers or {}))
        try:
            yield
        except Exception as exc:
            self._add("raised", item.rid, type(exc).__name__)
            raise
        self._add("exit", item.rid)

    def event(self, item, name, attributes):
        self._add("event", item.rid, name)

    def outcome(self, item, outcome, ran):
        self._add("outcome", item.rid, outcome, type(ran.exc).__name__ if ran.exc else None)


class Broken(hooks.Hook):
    wants_headers = True

    def submitting(self, queue, processor, headers):
        raise RuntimeError("submitting")

    def running(self, item):
        raise RuntimeError("running")

    def outcome(self, item, outcome, ran):
        raise RuntimeError("outcome")


@pytest.fixture
def installed():
    added = []

    def install(hook):
        hooks.install(hook)
        added.append(hook)
        return hook

    yield install
    for hook in added:
        hooks.uninstall(hook)
    assert not hooks.HOOKS.active


def test_headers_travel_from_submit_to_the_run_and_outcomes_are_heard(qc, installed):
    rec = installed(Recorder())
    one = qc.submit("default", "echo", ["a"]).id  # one item: the lean layout
    many = qc.submit("default", "echo", ["b", "c"]).id
    qc.define_queue("once", QueueConfig(max_attempts=1))
    failing = qc.submit("once", "fail", ["boom"]).id
    burst(qc, queues=("default", "once"))
    seen = rec.seen
    for rid, queue in ((one, "default"), (many, "default"), (failing, "once")):
        processor = "fail" if rid == failing else "echo"
        assert ("enter", rid, {"trace": f"{queue}/{processor}"}) in seen
    assert [e for e in seen if e[0] == "exit" and e[1] == many] == [("exit", many)] * 2
    assert ("outcome", one, "done", None) in seen
    assert ("raised", failing, "RuntimeError") in seen
    dead = [e for e in seen if e[0] == "outcome" and e[1] == failing]
    assert len(dead) == 1 and dead[0][2] == "dead" and dead[0][3] is not None
    assert qc.status(one)["state"] == "completed"


def test_a_hook_that_fails_everywhere_fails_no_item(qc, installed):
    installed(Broken())
    rec = installed(Recorder())
    rid = qc.submit("default", "uppercase", ["x", "y"]).id
    burst(qc)
    assert qc.status(rid)["state"] == "completed"
    assert [r["result"] for r in qc.results(rid)] == ["X", "Y"]
    assert ("enter", rid, {"trace": "default/uppercase"}) in rec.seen  # the broken hook added nothing


def test_without_hooks_no_headers_are_kept(qc, r):
    rid = qc.submit("default", "echo", ["a"]).id
    assert r.hget(qc.keys.request(rid).meta, "headers") is None


def test_lease_renewals_are_heard(qc, installed):
    rec = installed(Recorder())
    qc.define_queue("short", QueueConfig(lease_seconds=0.6))
    rid = qc.submit("short", "sleep", [1.0]).id
    burst(qc, queues=("short",))
    assert ("event", rid, "lease renewed") in rec.seen
