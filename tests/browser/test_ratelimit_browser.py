"""Throttled queues and requests in headless Chromium (issue 12, part 2): a
real worker runs a `5/s` queue and a request limited to `2/s`; the overview,
the queues page and the request's page show them throttled with their use
of the current window. Screenshots go to screenshots/ (look at them)."""
from __future__ import annotations

import pytest

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from tests.browser.conftest import shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_throttled_queues_and_requests_show_their_rate(page, worker_procs, submit_many):
    page.goto("/admin/queueadmin/queue/")  # the queue setting, as an operator sets it
    page.click("a:text('default')")
    page.fill("#id_rate_limit", "5 / sec")
    page.click("input[name=_save]")
    page.wait_for_selector("text=was changed successfully", timeout=10_000)
    assert services.engine().queue_config("default").rate_limit == "5/s"
    services.engine().define_queue("reports", QueueConfig())
    bulk, own = submit_many([
        {"queue": "default", "processor": "sleep", "items": ["0.01"] * 200, "concurrency": 20},
        {"queue": "reports", "processor": "sleep", "items": ["0.01"] * 100, "concurrency": 10,
         "rate_limit": "2/s"},
    ])
    worker_procs.start("default,reports", 1, False, "rates", "--threads", "8")
    page.goto("/")
    page.wait_for_selector("tr[data-queue=default] .badge.rate:text('throttled')", timeout=15_000)
    assert "of 5/s" in page.inner_text("tr[data-queue=default]")
    page.wait_for_selector("tr[data-queue=reports] .muted:text('1 throttled')", timeout=15_000)
    shot(page, "overview-throttled")

    page.goto("/queues/")
    page.wait_for_selector("tr[data-queue=reports] .muted:text('1 request with a limit')", timeout=10_000)
    assert "5/s" in page.inner_text("tr[data-queue=default]")
    assert "no limit" in page.inner_text("tr[data-queue=reports]")
    shot(page, "queues-throttled")

    page.goto(f"/requests/{own}/")
    page.wait_for_selector("dt:text('Rate limit')", timeout=10_000)
    assert "2/s" in page.inner_text("dl.kv")
    shot(page, "request-rate-limit")
    assert not page.errors, page.errors
    assert bulk
