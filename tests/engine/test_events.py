"""The engine's named events (core/engine/events.py): each fired from one
place, the built-in subscribers first, every subscriber heard even when one
fails."""
import pytest

from queueadmin.core.engine import events
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.features import chains, webhook_store
from tests.engine_helpers import burst


@pytest.fixture
def heard():
    """Subscribe a recorder to every event; unsubscribed afterwards."""
    got = []
    fns = {event: (lambda payload, event=event: got.append((event, payload))) for event in events.EVENTS}
    for event, fn in fns.items():
        events.subscribe(event, fn)
    yield got
    for event, fn in fns.items():
        events.unsubscribe(event, fn)


def test_the_built_in_subscribers_come_first_and_a_subscriber_is_heard_once():
    def mine(payload):
        pass

    events.subscribe(events.CANCELLED, mine)
    events.subscribe(events.CANCELLED, mine)
    try:
        assert events.subscribers(events.CANCELLED) == [chains.on_cancelled, webhook_store.on_cancelled, mine]
        assert events.subscribers(events.FINISHED)[0] == chains.on_finished
    finally:
        events.unsubscribe(events.CANCELLED, mine)
    assert mine not in events.subscribers(events.CANCELLED)
    with pytest.raises(ValueError):
        events.subscribe("no such event", mine)


def test_every_subscriber_runs_and_the_first_failure_is_raised():
    ran = []

    def boom(payload):
        ran.append("boom")
        raise RuntimeError("first")

    def later(payload):
        ran.append("later")
        raise KeyError("second")

    with pytest.raises(RuntimeError, match="first"):
        events.call_all([boom, later, ran.append], "payload")
    assert ran == ["boom", "later", "payload"]


def test_a_worker_fires_finished_once_per_batch_with_the_final_statuses(qc, heard):
    sub = qc.submit("default", "uppercase", ["a", "b"])
    burst(qc)
    (event, finished), = [h for h in heard if h[0] == events.FINISHED]
    assert finished.rids == [sub.id] and finished.client is qc
    assert [(s["id"], s["state"], s["done"]) for s in finished.statuses] == [(sub.id, "completed", 2)]


def test_cancel_fires_cancelled_with_the_meta_read_before(qc, heard):
    sub = qc.submit("default", "echo", ["a"], delay=600)
    qc.cancel(sub.id)
    (event, cancelled), = heard
    assert event == events.CANCELLED and cancelled.rid == sub.id and cancelled.meta["queue"] == "default"
    assert cancelled.status["state"] == "cancelled"


def test_an_item_judged_dead_fires_item_dead(qc, heard):
    qc.define_queue("once", QueueConfig(max_attempts=1))
    sub = qc.submit("once", "fail", ["x", "y"])
    burst(qc, ["once"])
    dead = sorted((p for e, p in heard if e == events.ITEM_DEAD), key=lambda p: p.index)
    assert [(d.queue, d.rid, d.index, d.attempt) for d in dead] == [("once", sub.id, 0, 1), ("once", sub.id, 1, 1)]
    assert all(d.entry and d.error for d in dead)
