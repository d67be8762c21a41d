"""Periodic requests in headless Chromium: defined in the Django admin, fired
by a real worker, listed on the Scheduled page with next run and last
request (kept current by the page's live socket), paused, resumed and run
now from there. A screenshot goes to screenshots/scheduled-periodic.png."""
from __future__ import annotations

import subprocess
import sys

import pytest

from queueadmin.core import services
from queueadmin.core.engine.features import periodic
from queueadmin.core.engine.config import QueueConfig
from tests.browser.conftest import ROOT, _env, shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAME = "browser-every-2s"


@pytest.fixture
def cleanup(redis_url, browser_db):
    """The browser database outlives this test: drop the schedule afterwards,
    or the dashboard would publish it again into the next test's Redis."""
    yield
    code = f"from queueadmin.core.models import PeriodicRequest; PeriodicRequest.objects.filter(name={NAME!r}).delete()"
    subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=_env(redis_url, browser_db),
                   check=True, capture_output=True)


def test_define_in_the_admin_then_watch_run_pause_and_resume_on_the_scheduled_page(page, worker_procs, cleanup):
    services.engine().define_queue("default", QueueConfig())
    worker_procs.start("default", 1, False, "periodic-browser")
    page.goto("/admin/queueadmin/periodicrequest/add/")
    page.fill("#id_name", NAME)
    page.select_option("#id_queue", "default")
    page.select_option("#id_processor", "echo")
    page.fill("#id_items", "hello\nworld")
    page.fill("#id_interval_seconds", "2")
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/queueadmin/periodicrequest/")
    assert periodic.next_runs(services.engine(), [NAME])[NAME] is not None  # published to Redis

    page.goto("/scheduled/")
    row = page.locator(f"tr[data-periodic='{NAME}']")
    assert "every 2 s" in row.inner_text()
    # the worker fires it; the live socket brings the last request without a reload
    link = row.locator("a.id")
    link.wait_for(timeout=15_000)
    rid = link.inner_text()
    assert rid == periodic.request_id(services.engine(), NAME, int(rid[:11], 16))  # derived from schedule and due time

    row.get_by_role("button", name="Pause").click()
    page.locator(".msg", has_text=f"{NAME} paused").wait_for()
    assert "paused" in page.locator(f"tr[data-periodic='{NAME}']").inner_text()
    assert periodic.next_runs(services.engine(), [NAME])[NAME] is None

    page.locator(f"tr[data-periodic='{NAME}']").get_by_role("button", name="Resume").click()
    page.locator(".msg", has_text=f"{NAME} resumed").wait_for()
    page.locator(f"tr[data-periodic='{NAME}']").get_by_role("button", name="Run now").click()
    message = page.locator(".msg", has_text="submitted request")
    message.wait_for()
    manual = message.inner_text().split("submitted request ")[1].split(".")[0]
    page.locator(f"tr[data-periodic='{NAME}'] a.id", has_text=manual).wait_for()
    shot(page, "scheduled-periodic")
    page.locator(f"tr[data-periodic='{NAME}'] a.id").click()
    page.wait_for_url(f"**/requests/{manual}/")
    page.locator("#state", has_text="completed").wait_for(timeout=15_000)
    assert not page.errors, page.errors
