"""A worker running fast items keeps a token for its request's next item when
nothing else waits at that priority or above (core/engine/keeping.py). It
saves a dispatch round trip per item; these tests hold it to the semantics:
the concurrency limit, strict priority, and changes made to a live request."""
import time

import pytest

from tests.engine_helpers import Threads, max_overlap, wait_for

pytestmark = pytest.mark.timeout(120)


def test_fast_items_keep_the_concurrency_limit_across_workers(qc):
    sub = qc.submit("default", "echo", list(range(3000)), concurrency=2)
    with Threads(qc, 3) as threads:
        threads.join()
    results = list(qc.results(sub.id))
    assert [r["index"] for r in results] == list(range(3000))
    assert {r["status"] for r in results} == {"done"} and {r["attempts"] for r in results} == {1}
    assert max_overlap(results) <= 2


def test_a_higher_priority_request_is_not_kept_waiting_behind_kept_tokens(qc):
    low = qc.submit("default", "echo", list(range(30_000)), priority=10, concurrency=4)
    with Threads(qc, 2) as threads:
        wait_for(lambda: qc.status(low.id)["done"] >= 1000, 60, message="the low request under way")
        sent = time.time()
        high = qc.submit("default", "echo", ["now"], priority=90)
        wait_for(lambda: qc.status(high.id)["state"] == "completed", 30, message="the high request done")
        threads.join(90)
    started = list(qc.results(high.id))[0]["started_at"]
    low_later = sum(1 for r in qc.results(low.id) if r["started_at"] > started)
    assert low_later > 1000  # the low request was far from done: the high one went ahead of it
    assert started - sent < 0.5, started - sent


def take(qc, rid, guard):
    """`take` for one token kept from the request's last item: guard is "k|priority"."""
    cfg = qc.queue_config("default")
    return qc.scripts("take", qc.keys.request(rid).all(),
                      ["w1", cfg.lease_ms, cfg.max_attempts, cfg.retention_ms, "", 1, guard])


def test_a_kept_token_goes_back_once_its_request_changed_priority_or_concurrency(qc):
    sub = qc.submit("default", "echo", list(range(10)), priority=50, concurrency=3)
    got = take(qc, sub.id, "3|50")
    assert got[0] == 0 and got[5] == 50 and got[6] == 0 and got[8] == "0"  # its first item (index 0)
    qc.set_priority(sub.id, 60)
    assert take(qc, sub.id, "3|50")[:1] == [5]  # claimed at 50: back to the queue, at 60 now
    assert take(qc, sub.id, "3|60")[8] == "1"
    qc.set_concurrency(sub.id, 2)
    assert take(qc, sub.id, "3|60")[:1] == [5]  # token 3 is above the new limit
    assert take(qc, sub.id, "2|60")[8] == "2"


def test_a_kept_token_of_a_rate_limited_request_goes_back(qc):
    sub = qc.submit("default", "echo", list(range(10)), rate_limit="100/s")
    assert take(qc, sub.id, "1|50")[:1] == [5]  # its starts are counted at claims
