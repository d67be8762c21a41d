"""The item page (/requests/<rid>/items/<n>/, core/views/item.py): payload,
result or error with traceback, log and the attempts as a timeline; linked
from the request page, in flight and dead letters; live while it runs; a
404 page for anything that names no item. Real redis-server, Django client."""
from __future__ import annotations

import re
import time

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.views.item import item_url
from tests.engine_helpers import Threads, burst, wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def flaky(eng):
    eng.define_queue("flaky", QueueConfig(max_attempts=3, backoff_seconds=0))
    return eng


def failed_request(eng) -> str:
    rid = services.submit("flaky", "fail", ["boom", "bang"]).id
    while eng.status(rid)["state"] != "failed":
        burst(eng, ["flaky"])
    return rid


def attempts_shown(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<li class="tl tone-\w+" data-outcome="([\w-]+)">\s*<div class="tl-head"><strong>Attempt (\d+)',
                      html)


def test_a_done_item_shows_payload_result_and_its_one_attempt(staff, eng):
    rid = services.submit("default", "uppercase", ["hello", "world"]).id
    burst(eng)
    response = staff.get(item_url(rid, 1))
    html = response.content.decode()
    assert response.status_code == 200
    assert "Item #1" in html and '<pre class="code">world</pre>' in html and '<pre class="code">WORLD</pre>' in html
    assert attempts_shown(html) == [("done", "1")]
    assert 'hx-trigger="every 1s"' not in html  # finished: nothing to refresh


def test_a_dead_item_shows_each_attempt_its_error_and_traceback(staff, flaky):
    rid = failed_request(flaky)
    html = staff.get(item_url(rid, 0)).content.decode()
    assert attempts_shown(html) == [("retried", "1"), ("retried", "2"), ("dead", "3")]
    assert html.count("RuntimeError: fail processor always fails (item: boom)") >= 4  # three attempts and the error
    assert "Traceback (most recent call last)" in html
    assert 'href="/dead/?request=' in html


def test_the_item_is_linked_from_the_request_page_and_dead_letters(staff, flaky):
    rid = failed_request(flaky)
    for page in (f"/requests/{rid}/", f"/dead/?request={rid}"):
        html = staff.get(page).content.decode()
        assert f'href="{item_url(rid, 0)}"' in html and f'href="{item_url(rid, 1)}"' in html, page


def test_a_running_item_is_live_and_linked_from_in_flight(staff, eng):
    eng.define_queue("slow", QueueConfig(lease_seconds=5))
    rid = services.submit("slow", "sleep", [0.2, 1.5], concurrency=2).id
    with Threads(eng, 1, ["slow"], threads=2):
        wait_for(lambda: eng.status(rid)["done"] == 1, 20)
        html = staff.get("/inflight/").content.decode()
        assert f'href="{item_url(rid, 1)}"' in html
        page = staff.get(item_url(rid, 1)).content.decode()
        assert 'data-status="running"' in page and 'hx-trigger="every 1s"' in page
        assert attempts_shown(page) == [("running", "1")]
        fragment = staff.get(item_url(rid, 1), headers={"HX-Request": "true"})
        assert fragment.status_code == 200 and b"<html" not in fragment.content and b'id="item-live"' in fragment.content
    assert attempts_shown(staff.get(item_url(rid, 1)).content.decode()) == [("done", "1")]


def test_a_one_item_request_has_its_page(staff, flaky):
    rid = services.submit("flaky", "fail", ["alone"]).id
    while flaky.status(rid)["state"] != "failed":
        burst(flaky, ["flaky"])
    html = staff.get(item_url(rid, 0)).content.decode()
    assert attempts_shown(html) == [("retried", "1"), ("retried", "2"), ("dead", "3")]
    assert staff.get(item_url(rid, 1)).status_code == 404


@pytest.mark.parametrize("path", ["/requests/nope/items/0/", "/requests/bad!id/items/0/", "/requests/x/items/-1/",
                                  "/requests/x/items/1e3/", "/requests/x/items/99999999999/"])
def test_anything_that_names_no_item_is_a_404_page(staff, eng, path):
    response = staff.get(path)
    assert response.status_code == 404 and b"not found" in response.content and b"Traceback" not in response.content


def test_past_the_last_item_is_a_404_and_viewers_may_look_but_anonymous_users_sign_in(staff, eng, viewer):
    rid = services.submit("default", "uppercase", ["a"]).id
    burst(eng)
    assert staff.get(item_url(rid, 1)).status_code == 404
    assert staff.get(item_url(rid, 0) + "?junk=%ff").status_code == 200
    looker = Client()
    looker.force_login(viewer)
    assert looker.get(item_url(rid, 0)).status_code == 200
    assert Client().get(item_url(rid, 0)).status_code == 302


@pytest.mark.slow
def test_any_request_id_or_index_gives_a_page_or_a_404_never_a_5xx(staff, eng):
    rid = services.submit("default", "uppercase", ["a", "b", "c"]).id
    burst(eng)
    segments = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(
        lambda s: "/" not in s and "?" not in s and "#" not in s and "\x00" not in s)

    @hsettings(max_examples=80, deadline=None, derandomize=True, database=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(rid_part=st.one_of(st.just(rid), segments), index=st.one_of(st.integers(-5, 10).map(str), segments))
    def visit(rid_part, index):
        response = staff.get(f"/requests/{rid_part}/items/{index}/")
        assert response.status_code in (200, 404, 301), (rid_part, index, response.status_code)
        if response.status_code == 200:  # an accepted address names that very item
            assert rid_part == rid and index in ("0", "1", "2")
            assert f"Item #{int(index)}".encode() in response.content

    visit()


def test_items_of_a_streamed_request_are_found_and_a_retried_copy_wins(eng, flaky):
    """Items added in several calls have ids of several milliseconds (a binary
    search finds each); a dead letter sent back runs as a copy at the end."""
    from queueadmin.core.queries.item import item

    sub = eng.begin("flaky", "fail")
    for start in range(0, 60, 7):
        eng.add(sub.id, [f"p{i}" for i in range(start, min(60, start + 7))])
        time.sleep(0.003)
    eng.finalize(sub.id)
    assert [item(sub.id, i)["payload"] for i in range(60)] == [f"p{i}" for i in range(60)]
    assert item(sub.id, 60) is None and item(sub.id, -1) is None
    while eng.status(sub.id)["state"] != "failed":
        burst(eng, ["flaky"])
    dead = {d["index"]: d["entry"] for d in eng.dead_letters(sub.id)}
    eng.retry_dead(sub.id, [dead[41]])
    again = item(sub.id, 41)
    assert again["entry"] != dead[41] and again["status"] == "pending" and again["payload"] == "p41"
    assert [a["outcome"] for a in again["attempts"]] == ["retried", "retried", "dead"]  # the history stays
    assert item(sub.id, 40)["entry"] == dead[40] and item(sub.id, 40)["status"] == "failed"
