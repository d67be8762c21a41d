"""Rate limits (issue 12): a queue's and a request's `N/window` hold across
every worker, enforced where tokens are claimed, while other queues and
requests run at full speed. Real Redis, real worker processes."""
import bisect
import time

import pytest
from hypothesis import given, settings, strategies as st

from queueadmin.core.engine.features import ratelimit
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.errors import QueueError
from tests.engine_helpers import Threads, wait_for
from tests.engine.test_crash import assert_exactly_one_result_per_item, completed

pytestmark = pytest.mark.timeout(120)


def busiest_window(starts: list[float], seconds: float) -> int:
    """The most start times in any window [t, t + seconds)."""
    starts = sorted(starts)
    return max((bisect.bisect_left(starts, t + seconds) - i for i, t in enumerate(starts)), default=0)


def starts_of(qc, rid) -> list[float]:
    return [r["started_at"] for r in qc.results(rid)]


def claim(qc, queue, want, worker="w:1:aa"):
    """One dispatch round trip: (wait hint in ms, tokens claimed)."""
    qk, cfg = qc.keys.queue(queue), qc.queue_config(queue)
    wait, *tokens = qc.scripts("cycle", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked, qk.wake,
                                         qk.config, qk.lastserved, qk.rate, qk.ratelog, qk.needs,
                                      qk.groups, qk.glimits, qk.gheld, qk.packed, qk.lane, qk.tomb],
                               [worker, cfg.lease_ms, want, 0, 1])
    return int(wait), tokens


# -- the text of a limit ------------------------------------------------------

@pytest.mark.parametrize("text, count, window_ms, canonical", [
    ("20/s", 20, 1000, "20/s"), ("600/min", 600, 60_000, "600/min"), ("10000/h", 10_000, 3_600_000, "10000/h"),
    (" 5 / 10 s ", 5, 10_000, "5/10s"), ("1/2min", 1, 120_000, "1/2min"), ("3/sec", 3, 1000, "3/s"),
    ("7/seconds", 7, 1000, "7/s"), ("60/60s", 60, 60_000, "60/min"), ("2/D", 2, 86_400_000, "2/d"),
    ("100/hours", 100, 3_600_000, "100/h"),
])
def test_limits_are_read_in_the_usual_spellings(text, count, window_ms, canonical):
    rate = ratelimit.parse(text)
    assert (rate.count, rate.window_ms, rate.text) == (count, window_ms, canonical)
    assert ratelimit.parse(rate.text) == rate


@pytest.mark.parametrize("text", ["fast", "20", "/s", "0/s", "-1/s", "20/ms", "20/w", "1.5/s", "200000/s",
                                  "1/8d", "20/0s", "20 per second", "20/s/s"])
def test_a_malformed_limit_is_refused_with_a_reason(text, qc):
    with pytest.raises(ratelimit.RateLimitError, match="rate limit"):
        ratelimit.parse(text)
    with pytest.raises(QueueError, match="rate limit"):
        qc.submit("default", "echo", ["x"], rate_limit=text)
    with pytest.raises(QueueError, match="rate limit"):
        qc.define_queue("default", QueueConfig(rate_limit=text))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=30), st.from_regex(r"\s*\d{1,7}\s*/\s*\d{0,3}\s*[a-zA-Z]{1,7}\s*", fullmatch=True)))
def test_any_text_is_a_limit_or_a_clear_refusal(text):
    try:
        rate = ratelimit.parse(text)
    except ratelimit.RateLimitError as exc:
        assert "rate limit" in str(exc)
        return
    if rate is not None:  # what is accepted round-trips exactly
        assert ratelimit.parse(rate.text) == rate and 1 <= rate.count <= ratelimit.MAX_COUNT


# -- the dispatch script ------------------------------------------------------

def test_the_claim_stops_at_the_queue_limit_and_says_when_to_look_again(qc):
    qc.define_queue("lim", QueueConfig(rate_limit="3/s"))
    qc.submit("lim", "echo", list(range(10)), concurrency=10)
    wait, tokens = claim(qc, "lim", 10)
    assert len(tokens) == 3 and 900 < wait <= 1000 + ratelimit.margin_ms(1000)
    wait, tokens = claim(qc, "lim", 10)
    assert tokens == [] and 0 < wait <= 1000 + ratelimit.margin_ms(1000)
    time.sleep(wait / 1000 + 0.01)
    assert len(claim(qc, "lim", 10)[1]) == 3  # the window slid past the first three
    assert ratelimit.usage(qc.redis, qc.keys, "lim")[""] == 3


def test_a_request_at_its_limit_is_passed_over_and_keeps_its_place(qc):
    slow = qc.submit("default", "echo", list(range(5)), concurrency=5, rate_limit="2/min", priority=90)
    free = qc.submit("default", "echo", list(range(10, 15)), concurrency=5, priority=10)
    _, tokens = claim(qc, "default", 10)
    by_rid = [t.rpartition("#")[0] for t in tokens]
    assert by_rid[:2] == [slow.id, slow.id] and by_rid[2:] == [free.id] * 5  # best priority first, up to its limit
    assert qc.redis.zcard(qc.keys.queue("default").tokens) == 3  # the rest of `slow` still waits, in order
    assert ratelimit.usage(qc.redis, qc.keys, "default", [slow.id]) == {"": 0, slow.id: 2}
    assert qc.status(slow.id)["rate_limit"] == "2/min"


def test_a_finished_request_leaves_no_rate_state_behind(qc):
    sub = qc.submit("default", "echo", list(range(4)), concurrency=4, rate_limit="100/s")
    with Threads(qc, 1, threads=4):
        pass
    assert qc.status(sub.id)["state"] == "completed"
    assert not qc.redis.hexists(qc.keys.queue("default").rate, f"lim:{sub.id}")


# -- across workers -------------------------------------------------------------

def test_a_queue_limit_holds_across_four_workers_while_another_queue_runs_free(qc, workers):
    """The issue's test: `20/s` over 200 items with four worker processes."""
    qc.define_queue("limited", QueueConfig(rate_limit="20/s"))
    qc.define_queue("free", QueueConfig())
    limited = qc.submit("limited", "sleep", [0.05] * 200, concurrency=200)
    free = qc.submit("free", "sleep", [0.02] * 400, concurrency=64)
    began = time.time()
    for _ in range(4):
        workers.start("limited,free", 1, False, "", "--threads", "8")
    wait_for(completed(qc, free.id), 60, message="the free queue")
    free_done = time.time()
    wait_for(completed(qc, limited.id), 60, message="the limited queue")
    assert_exactly_one_result_per_item(qc, limited.id, 200)
    starts = starts_of(qc, limited.id)
    print(f"\nlimited: busiest 1 s window {busiest_window(starts, 1.0)}, spread {max(starts) - min(starts):.2f} s; "
          f"free: busiest 1 s window {busiest_window(starts_of(qc, free.id), 1.0)}, done {free_done - began:.2f} s "
          f"after the launch")
    # the starts are stamped by the workers, after Redis let them begin: allow their scheduling
    # jitter (a loaded machine delays one process's stamp by tens of ms) by looking at 0.95 s windows
    assert busiest_window(starts, 0.95) <= 20
    assert max(starts) - min(starts) >= 9.0  # 200 starts at 20 a second
    assert max(starts) - min(starts) < 20.0  # and not much slower than the limit
    # the other queue ran meanwhile at several times the limit, done long before the limited one
    free_starts = starts_of(qc, free.id)
    assert busiest_window(free_starts, 1.0) > 60
    assert free_done < max(starts) - 2 and min(free_starts) - began < 10


def test_a_request_limit_throttles_only_that_request(qc):
    slow = qc.submit("default", "sleep", [0.01] * 30, concurrency=30, rate_limit="10/s", priority=90)
    free = qc.submit("default", "sleep", [0.01] * 150, concurrency=20, priority=10)
    with Threads(qc, 2, threads=8):
        wait_for(completed(qc, free.id), 30, message="the unthrottled request")
        assert qc.status(slow.id)["done"] < 30  # lower priority, yet not held up by the throttled one
    assert busiest_window(starts_of(qc, slow.id), 1.0) <= 10
    assert busiest_window(starts_of(qc, free.id), 1.0) > 30


def test_a_queue_limit_changed_in_flight_applies_at_once(qc):
    qc.define_queue("lim", QueueConfig(rate_limit="2/min"))
    qc.submit("lim", "echo", list(range(6)), concurrency=6)
    assert len(claim(qc, "lim", 6)[1]) == 2 and claim(qc, "lim", 6)[1] == []
    qc.define_queue("lim", QueueConfig(rate_limit=""))
    assert len(claim(qc, "lim", 6)[1]) == 4
