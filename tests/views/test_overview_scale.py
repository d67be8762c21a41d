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
        eng.submit("default", "echo", [i], priority=70 if i % 2 else 20, dedup=False)
    ov, q = _queue(staff)
    assert q["estimated"] and q["sampled"] == 40 and q["live_requests"] == 100
    # the sample is the oldest 40 by creation time: requests of the same millisecond come in id
    # order, so its split between the priorities is near, not exactly, half and half
    assert abs(q["depth"] - 100) <= 1
    assert [p for p, _ in q["depth_by_priority"]] == [70, 20]
    assert all(30 <= n <= 70 for _, n in q["depth_by_priority"])
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
