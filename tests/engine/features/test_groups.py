"""Groups (issue 23, part 1): a group's concurrency and rate limits hold
across every worker, enforced where tokens are claimed; groups at one
priority take fair turns (round-robin by group, then by request within a
group); strict priority still holds; a worker killed while holding a
group's item does not block the group. Real Redis, real worker processes,
on one server and on a local cluster."""
import bisect
import time

import pytest
from hypothesis import given, settings, strategies as st

from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features import groups
from tests.engine_helpers import Threads, burst, dispatch_is_empty, max_overlap, wait_for
from tests.engine.test_crash import assert_exactly_one_result_per_item, completed

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)

pytestmark = pytest.mark.timeout(120)


def records(qc, subs) -> list[dict]:
    return [r for sub in subs for r in qc.results(sub.id)]


def start_order(qc, named: dict[str, list]) -> list[str]:
    """The names of the requests' items, in the order they started."""
    starts = [(r["started_at"], name) for name, subs in named.items() for sub in subs for r in qc.results(sub.id)]
    return [name for _, name in sorted(starts)]


def busiest_window(starts: list[float], seconds: float) -> int:
    starts = sorted(starts)
    return max((bisect.bisect_left(starts, t + seconds) - i for i, t in enumerate(starts)), default=0)


# -- limits -------------------------------------------------------------------

@pytest.mark.slow
def test_a_group_concurrency_limit_holds_across_four_worker_processes(qc, workers):
    # worker processes push the database's queue settings to Redis as they start: a group's own limit stays
    qc.set_group_limits("default", "tenant-a", concurrency=2)
    a = [qc.submit("default", "sleep", [0.05] * 10, concurrency=4, group="tenant-a", dedup=False) for _ in range(3)]
    b = [qc.submit("default", "sleep", [0.05] * 24, concurrency=4, group="tenant-b")]
    for _ in range(4):
        workers.start("default", 1, False, "", "--threads", "1")
    for sub in a + b:
        wait_for(completed(qc, sub.id), 60, message=workers.logs())
    ra, rb = records(qc, a), records(qc, b)
    assert len(ra) == 30 and len(rb) == 24
    assert max_overlap(ra) == 2  # three requests of 4 each, 4 workers: the group's 2 bind
    assert max_overlap(rb) >= 2  # the other group runs beside it, under its own limit
    assert len({r["worker"] for r in ra + rb}) >= 3
    assert dispatch_is_empty(qc)


def test_a_groups_own_concurrency_limit_overrides_the_default_and_can_be_cleared(qc):
    qc.define_queue("default", QueueConfig(group_concurrency=1))
    qc.set_group_limits("default", "wide", concurrency=3)
    narrow = [qc.submit("default", "sleep", [0.04] * 8, concurrency=4, group="narrow")]
    wide = [qc.submit("default", "sleep", [0.04] * 12, concurrency=4, group="wide")]
    with Threads(qc, 6):
        pass
    assert max_overlap(records(qc, narrow)) == 1 and max_overlap(records(qc, wide)) == 3
    qc.clear_group_limits("default", "wide")
    again = [qc.submit("default", "sleep", [0.04] * 8, concurrency=4, group="wide")]
    with Threads(qc, 4):
        pass
    assert max_overlap(records(qc, again)) == 1


def test_a_group_rate_limit_holds_across_four_workers_from_start_times(qc):
    qc.set_group_limits("default", "slow", rate_limit="5/s")
    slow = [qc.submit("default", "echo", [f"s{i}-{j}" for j in range(6)], concurrency=6, group="slow")
            for i in range(2)]
    free = [qc.submit("default", "echo", [f"f{j}" for j in range(30)], concurrency=10, group="free")]
    with Threads(qc, 4):
        pass
    starts = [r["started_at"] for r in records(qc, slow)]
    assert len(starts) == 12 and busiest_window(starts, 1.0) <= 5
    assert max(starts) - min(starts) >= 2.0  # 12 starts at 5 a second
    free_starts = [r["started_at"] for r in records(qc, free)]
    assert max(free_starts) - min(free_starts) < 1.5  # the other group was not held back


def test_limits_are_checked(qc):
    with pytest.raises(QueueError, match="concurrency"):
        qc.set_group_limits("default", "a", concurrency=-1)
    with pytest.raises(QueueError, match="rate limit"):
        qc.set_group_limits("default", "a", rate_limit="fast")
    with pytest.raises(QueueError, match="group"):
        qc.set_group_limits("default", "a|b", concurrency=1)
    with pytest.raises(QueueError, match="group concurrency"):
        qc.define_queue("default", QueueConfig(group_concurrency=-1))
    with pytest.raises(QueueError, match="rate limit"):
        qc.define_queue("default", QueueConfig(group_rate_limit="soon"))


# -- fair turns ---------------------------------------------------------------

def test_a_group_of_one_request_takes_its_turn_before_a_group_of_a_thousand(qc):
    big = [qc.submit("default", "echo", [i], group="big") for i in range(1000)]
    small = [qc.submit("default", "echo", ["small"], group="small")]
    burst(qc)
    order = start_order(qc, {"big": big, "small": small})
    assert len(order) == 1001
    assert order.index("small") < 5  # without groups it would start last


def test_the_requests_of_a_group_take_turns(qc):
    named = {"a1": [qc.submit("default", "echo", [f"a1-{i}" for i in range(20)], concurrency=1, group="a")],
             "a2": [qc.submit("default", "echo", [f"a2-{i}" for i in range(20)], concurrency=1, group="a")]}
    burst(qc)
    first = start_order(qc, named)[:10]
    assert first.count("a1") == first.count("a2") == 5, first


def test_groups_share_the_claims_evenly_whatever_their_number_of_tokens(qc):
    """One claim at a time (the item before given back in the same call): a
    group with ten tokens and a group with two take turns."""
    big = qc.submit("default", "echo", [f"a{i}" for i in range(40)], concurrency=10, group="a")
    small = qc.submit("default", "echo", [f"b{i}" for i in range(40)], concurrency=2, group="b")
    order, held = [], []
    for _ in range(20):
        releases = [held.pop(), "return", 0] if held else []
        claimed = qc.store.queue.cycle("default", "w1", 60_000, 1, aging=False, live_workers=1, least_share=1,
                                       lacks="", releases=releases)
        held += claimed.tokens
        order.append("a" if claimed.tokens[0].startswith(big.id) else "b")
    assert 8 <= order.count("b") <= 12, order  # without groups: 2 in 12 (its share of the tokens)
    assert small.id


def test_strict_priority_still_holds_between_groups_and_without(qc):
    low = [qc.submit("default", "echo", [f"low{i}"], priority=50, group="a") for i in range(5)]
    high = [qc.submit("default", "echo", ["high"], priority=90)]
    mid = [qc.submit("default", "echo", ["mid"], priority=80, group="b")]
    burst(qc)
    order = start_order(qc, {"low": low, "high": high, "mid": mid})
    assert order[:2] == ["high", "mid"] and order[2:] == ["low"] * 5


def test_ungrouped_requests_keep_their_order(qc):
    subs = {f"r{i}": [qc.submit("default", "echo", [f"x{i}"])] for i in range(10)}
    burst(qc)
    assert start_order(qc, subs) == [f"r{i}" for i in range(10)]


# -- the group travels with the request ----------------------------------------

def test_the_group_is_kept_through_schedule_and_priority_changes(qc):
    sub = qc.submit("default", "echo", ["a", "b"], delay=0.3, group="t1", concurrency=2)
    rid = sub.id
    qk = qc.keys.queue("default")
    assert qc.redis.hget(qk.reqs, rid).endswith("|t1")
    assert qc.redis.hget(qc.keys.request(rid).meta, "group") == "t1"
    qc.set_priority(rid, 70)
    assert qc.redis.hget(qk.reqs, rid).split("|")[0::4] == ["70", "t1"]
    time.sleep(0.35)
    assert qc.store.queue.tick("default", 100, 0).promoted == [rid]
    assert qc.redis.hget(qk.reqs, rid).split("|")[3:] == ["q", "t1"]
    burst(qc)
    assert qc.status(rid)["state"] == "completed"
    one = qc.submit("default", "echo", ["alone"], group="t2")
    assert qc.redis.hget(qc.keys.request(one.id).meta, "group") == "t2"
    streamed = qc.begin("default", "echo", group="t3")
    assert qc.redis.hget(qk.reqs, streamed.id).endswith("|t3")


def test_group_stats_show_in_flight_limits_and_waiting(qc):
    qc.set_group_limits("default", "a", concurrency=1, rate_limit="100/min")
    qc.submit("default", "echo", ["x", "y", "z"], concurrency=3, group="a")
    qc.submit("default", "echo", ["u", "v"], concurrency=2, group="b")
    claimed = qc.store.queue.cycle("default", "w1", 60_000, 10, aging=False, live_workers=1, least_share=1,
                                   lacks="", releases=[])
    assert len(claimed.tokens) == 3  # a's one, b's two
    stats = {s["group"]: s for s in qc.group_stats("default")}
    assert stats["a"]["in_flight"] == 1 and stats["a"]["concurrency"] == 1 and stats["a"]["throttled"]
    assert stats["a"]["waiting"] == 2 and stats["a"]["rate_limit"] == "100/min" and stats["a"]["rate_used"] == 1
    assert stats["b"]["in_flight"] == 2 and stats["b"]["waiting"] == 0 and not stats["b"]["throttled"]


# -- crashes ------------------------------------------------------------------

@pytest.mark.slow
def test_a_worker_killed_holding_a_groups_item_does_not_block_the_group(qc, workers):
    qc.define_queue("crash", QueueConfig(lease_seconds=2))
    qc.set_group_limits("crash", "g", concurrency=1)
    sub = qc.submit("crash", "sleep", [0.4] * 4, concurrency=2, group="g")
    qk = qc.keys.queue("crash")
    first = workers.start("crash")
    wait_for(lambda: qc.redis.hlen(qk.held) >= 1, 30, interval=0.01)
    workers.kill(first)
    workers.start("crash")
    wait_for(completed(qc, sub.id), 90, message=workers.logs())
    assert_exactly_one_result_per_item(qc, sub.id, 4)
    assert max_overlap(list(qc.results(sub.id))) == 1


# -- names ----------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["", "a|b", "line\nbreak", "tab\there", "x" * 65, "\x00", " ", 7])
def test_a_bad_group_is_refused_with_a_clear_error(qc, bad):
    if bad == "":
        assert groups.check_group(bad) is None  # no group
        return
    with pytest.raises(QueueError, match="group"):
        qc.submit("default", "echo", ["x"], group=bad)
    with pytest.raises(QueueError, match="group"):
        qc.submit("default", "echo", ["x", "y"], group=bad)
    with pytest.raises(QueueError, match="group"):
        qc.begin("default", "echo", group=bad)
    assert qc.redis.hlen(qc.keys.queue("default").reqs) == 0


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=80), st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=70)))
def test_any_text_is_a_group_or_a_clear_refusal(text):
    try:
        g = groups.check_group(text)
    except QueueError as exc:
        assert "group" in str(exc)
        return
    if text:
        assert g == text and 1 <= len(g) <= 64 and "|" not in g and all(ord(c) >= 32 for c in g)
