"""The live pages' topics (core/live/topics.py): the exact forms a socket may
watch, and which events change each."""
import pytest

from queueadmin.core.live.topics import MAX_ROWS, period, request_ids, topic_ok

PAGES = ["overview", "workers", "queues", "request:0190a1b2c3d-ab:$:", "request:r1:1700000000000-0:",
         "request:r1::1700000000000-3", "rows:a,b,c", "inflight::0:1", "inflight:default:1:12",
         "dead:::1", "dead:default:r1:2", "scheduled:3"]
NOT_PAGES = ["", "overview:", "request:r1", "request:<b>:$:", "rows:a,a", "rows:" + ",".join(f"r{n}" for n in
             range(MAX_ROWS + 1)), "inflight:default:2:1", "inflight:default:0:0", "dead:q:r:01", "scheduled:",
             "queues ", "nope", "x" * 3000, None]


@pytest.mark.parametrize("topic", PAGES)
def test_the_forms_the_pages_use_are_topics(topic):
    assert topic_ok(topic)


@pytest.mark.parametrize("topic", NOT_PAGES)
def test_anything_else_is_not(topic):
    assert not topic_ok(topic)


def test_a_topic_knows_the_requests_whose_events_change_it_and_its_refresh_period():
    assert request_ids("request:r1:$:") == {"r1"} and request_ids("rows:a,b") == {"a", "b"}
    assert request_ids("workers") == set() and request_ids("overview") is None  # any event
    assert period("workers") == 2.0 and period("rows:a") is None
