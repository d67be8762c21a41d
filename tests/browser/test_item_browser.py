"""The item page in headless Chromium against a real worker process: opened
from the request page's #n and from dead letters, it shows the attempts as
a timeline (retried, retried, dead, each with its worker and reason); a
running item's page follows it live until it is done; screenshots at
1440x900 and 390x844, light and dark, with nothing wider than the screen."""
from __future__ import annotations

import pytest

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from tests.browser.conftest import shot
from tests.browser.test_activity_browser import login
from tests.engine_helpers import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def queues(redis_url):
    eng = services.engine()
    eng.define_queue("default", QueueConfig())
    eng.define_queue("flaky", QueueConfig(max_attempts=3, backoff_seconds=0.2))
    return eng


def outcomes(pg) -> list[str]:
    return pg.eval_on_selector_all("#attempts li.tl", "els => els.map(e => e.dataset.outcome)")


def test_an_item_opened_from_the_request_page_and_from_dead_letters(page, queues, worker_procs, submit_many):
    [rid] = submit_many([{"queue": "flaky", "processor": "fail", "items": ["first", "second"]}])
    worker_procs.start("flaky")
    wait_for(lambda: queues.status(rid)["state"] == "failed", 30, message=worker_procs.logs())

    page.goto(f"/requests/{rid}/")
    page.click("#items-table a:text-is('#1')")
    page.wait_for_url(f"**/requests/{rid}/items/1/")
    page.wait_for_selector("#attempts li.tl")
    assert outcomes(page) == ["retried", "retried", "dead"]
    timeline = page.inner_text("#attempts")
    assert timeline.count("RuntimeError: fail processor always fails (item: second)") == 3, timeline
    assert "host " in timeline and "pid " in timeline
    assert "Traceback" in page.inner_text("#item-error")

    page.goto(f"/dead/?request={rid}")
    page.click("#dead-table a:text-is('#0')")
    page.wait_for_url(f"**/requests/{rid}/items/0/")
    assert outcomes(page) == ["retried", "retried", "dead"]
    assert "first" in page.inner_text("#item-payload")
    assert [e for e in page.errors if "Applying inline style" not in e] == []


def test_a_running_item_is_followed_live_until_done(page, queues, worker_procs, submit_many):
    [rid] = submit_many([{"queue": "default", "processor": "chatty", "items": ["2.5"]}])
    worker_procs.start("default")
    wait_for(lambda: queues.status(rid)["in_flight"] == 1, 20, message=worker_procs.logs())
    page.goto(f"/requests/{rid}/items/0/")
    page.wait_for_selector("#item-live[data-status=running]")
    assert outcomes(page) == ["running"]
    page.locator("#item-live .tiles", has_text="50%").wait_for(timeout=5_000)  # its ctx.progress, polled in
    page.wait_for_selector("#item-live[data-status=done]", timeout=15_000)  # no reload: htmx refreshes it
    assert outcomes(page) == ["done"]
    assert "starting 2.5" in page.inner_text("#item-log")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshots_phone_and_desktop(chromium, dashboard, queues, worker_procs, submit_many, scheme):
    [rid] = submit_many([{"queue": "flaky", "processor": "fail",
                          "items": [{"invoice": 4812, "lines": [{"sku": "A-1", "qty": 2}], "note": "x" * 300}]}])
    worker_procs.start("flaky")
    wait_for(lambda: queues.status(rid)["state"] == "failed", 30, message=worker_procs.logs())
    for width, height in ((1440, 900), (390, 844)):
        context, pg = login(chromium, dashboard, viewport={"width": width, "height": height}, color_scheme=scheme)
        pg.goto(f"/requests/{rid}/items/0/")
        pg.wait_for_selector("#attempts li.tl")
        assert pg.evaluate("document.documentElement.scrollWidth") <= width + 1
        shot(pg, f"item-{width}-{scheme}")
        assert pg.errors == []
        context.close()


def test_a_sigkilled_workers_attempt_shows_as_lease_expired(page, queues, worker_procs, submit_many):
    queues.define_queue("crashy", QueueConfig(lease_seconds=1))
    [rid] = submit_many([{"queue": "crashy", "processor": "sleep", "items": [1.0, 1.0]}])
    victim = worker_procs.start("crashy", 1, False, "", "--threads", "2")
    wait_for(lambda: queues.status(rid)["in_flight"] == 2, 20, interval=0.02, message=worker_procs.logs())
    worker_procs.kill(victim)
    worker_procs.start("crashy")
    wait_for(lambda: queues.status(rid)["state"] == "completed", 40, message=worker_procs.logs())
    page.goto(f"/requests/{rid}/items/0/")
    page.wait_for_selector("#attempts li.tl")
    assert outcomes(page) == ["lease-expired", "done"]
    assert f"pid {victim.pid}" in page.inner_text("#attempts li.tl >> nth=0")
    assert "lease ran out" in page.inner_text("#attempts")
    shot(page, "item-lease-expired-1440-light")
