"""The overview at scale (core/queries/overview.py): a queue of more live
requests than SAMPLE is counted from its oldest SAMPLE and the rest
estimated in proportion, said so on the page; below SAMPLE it is exact."""
import importlib

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db
# the module (the package exports a function of the same name)
overview_queries = importlib.import_module("queueadmin.core.queries.overview")


@pytest.fixture
def small_sample(monkeypatch):
    monkeypatch.setattr(overview_queries, "SAMPLE", 40)


def _queue(staff, name="default"):
    ov = staff.get(reverse("queueadmin:overview")).context["ov"]
    return ov, next(q for q in ov["queues"] if q["name"] == name)


def test_a_queue_past_the_sample_is_estimated_from_its_oldest_requests(staff, eng, small_sample):
    for i in range(100):
        eng.submit("default", "echo", [i, -i], priority=70 if i % 2 else 20, dedup=False)
    ov, q = _queue(staff)
    assert q["estimated"] and q["sampled"] == 40 and q["live_requests"] == 100
    # the sample is the oldest 40 by creation time: requests of the same millisecond come in id
    # order, so its split between the priorities is near, not exactly, half and half
    assert abs(q["depth"] - 200) <= 2
    assert [p for p, _ in q["depth_by_priority"]] == [70, 20]
    assert all(60 <= n <= 140 for _, n in q["depth_by_priority"])
    assert ov["totals"]["estimated"]
    body = staff.get(reverse("queueadmin:overview")).content.decode()
    assert "(estimated)" in body and "counted from the oldest 40 of 100 live requests" in body


def test_below_the_sample_the_counts_are_exact_and_not_marked(staff, eng, small_sample):
    for i in range(30):
        eng.submit("default", "echo", [i], dedup=False)
    eng.submit("default", "echo", ["a", "b", "c"], dedup=False)
    ov, q = _queue(staff)
    assert not q["estimated"] and q["depth"] == 33 and q["live_requests"] == 31
    assert not ov["totals"]["estimated"]
    assert "(estimated)" not in staff.get(reverse("queueadmin:overview")).content.decode()


def test_one_item_requests_waiting_packed_are_counted_exactly_past_the_sample(staff, eng, small_sample):
    """They have no index entry (engine/store/packed.py): the queue's counts
    by band stand for them, so a backlog of them is never estimated, beside
    requests that are, and the oldest of them sets the latency."""
    ones = [eng.submit("default", "echo", [i], priority=70 if i % 3 else 20, dedup=False) for i in range(100)]
    for i in range(60):
        eng.submit("default", "echo", [i, -i], priority=50, dedup=False)
    assert eng.redis.zcard(eng.keys.queue("default").index) == 60
    ov, q = _queue(staff)
    assert q["live_requests"] == 160 and q["queued_requests"] == 160 and q["estimated"]
    by = dict(q["depth_by_priority"])
    assert (by[70], by[20]) == (66, 34) and abs(by[50] - 120) <= 2
    assert q["latency"] > 0
    eng.cancel(ones[0].id)  # priority 20
    eng.set_priority(ones[1].id, 90)
    _, q = _queue(staff)
    by = dict(q["depth_by_priority"])
    assert q["live_requests"] == 159 and (by[90], by[70], by[20]) == (1, 65, 33)
