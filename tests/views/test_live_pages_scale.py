"""The pages that refresh by themselves, past a queue's SAMPLE live requests
(queries.base.started_meta): the in-flight and dead-letter pages, and the
dead-letter counts of /metrics, read the requests workers hold, those next
in line and the oldest SAMPLE, not every live request, and say so."""
import importlib

import pytest
from django.urls import reverse

from queueadmin.core import queries
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.runtime.processors import Processors
from queueadmin.core.engine.runtime.worker import Worker
from tests.engine.client.test_reads import ghost_take
from tests.engine_helpers import ALL_PROCESSORS

pytestmark = pytest.mark.django_db
base = importlib.import_module("queueadmin.core.queries.base")
dead_queries = importlib.import_module("queueadmin.core.queries.dead")


@pytest.fixture
def small_sample(monkeypatch):
    monkeypatch.setattr(base, "SAMPLE", 3)
    monkeypatch.setattr(base, "NEXT_IN_LINE", 2)


def backlog(eng, n=6, items=2):
    """n waiting requests of `items` items, older than what the test makes next."""
    return [eng.submit("default", "echo", [i] * items, priority=10, dedup=False).id for i in range(n)]


def test_an_item_in_flight_past_the_sample_is_listed_and_the_page_says_it_samples(staff, eng, small_sample):
    backlog(eng)
    late = eng.submit("default", "echo", ["late"], priority=90, dedup=False)  # the newest, taken first
    rid, entry = ghost_take(eng, "default")
    assert rid == late.id
    found = queries.inflight_page(None, False, 1, 50)
    assert [(r["request"], r["entry"]) for r in found["rows"]] == [(late.id, entry)]
    assert found["count"] == 1 and found["sampled"]
    body = staff.get(reverse("queueadmin:inflight")).content.decode()
    assert late.id in body and "(of requests being worked on and the oldest 3)" in body


def test_a_dead_letter_of_a_started_request_next_in_line_is_listed_and_counted(staff, eng, small_sample):
    eng.define_queue("default", QueueConfig(max_attempts=1))
    backlog(eng)
    bad = eng.submit("default", "fail", ["a", "b"], priority=90, concurrency=1, dedup=False)
    w = Worker(eng, ["default"], Processors(ALL_PROCESSORS), burst=True, threads=1, install_signals=False,
               max_items=1)
    w.work()  # one item: the first of `bad`, which fails for good; its other item waits, first in line
    st = eng.status(bad.id)
    assert (st["state"], st["failed"], st["dead"]) == ("running", 1, 1)
    found = queries.dead_page("default")
    assert [r["request"] for r in found["rows"]] == [bad.id] and found["sampled"]
    page = staff.get(reverse("queueadmin:dead"))
    assert page.context["count_label"] == "1+" and not page.context["exact"]
    assert dead_queries.counts_by_queue() == {"default": 1}  # what /metrics says


def test_below_the_sample_every_live_request_is_read_and_nothing_is_marked(staff, eng, monkeypatch):
    monkeypatch.setattr(base, "SAMPLE", 50)
    backlog(eng)
    rid, entry = ghost_take(eng, "default")
    found = queries.inflight_page(None, False, 1, 50)
    assert [(r["request"], r["entry"]) for r in found["rows"]] == [(rid, entry)] and not found["sampled"]
    assert "oldest" not in staff.get(reverse("queueadmin:inflight")).content.decode()
    assert staff.get(reverse("queueadmin:dead")).context["count_label"] == "0"


def test_a_backlog_waiting_packed_is_never_sampled_here(staff, eng, small_sample):
    """One-item requests waiting packed have no index entry (engine/store/packed.py)
    and nothing in flight or dead: however many wait, these pages read exactly."""
    backlog(eng, n=8, items=1)
    late = eng.submit("default", "echo", ["late"], priority=90, dedup=False)
    rid, entry = ghost_take(eng, "default")
    found = queries.inflight_page(None, False, 1, 50)
    assert rid == late.id and [(r["request"], r["entry"]) for r in found["rows"]] == [(late.id, entry)]
    assert not found["sampled"] and staff.get(reverse("queueadmin:dead")).context["count_label"] == "0"
