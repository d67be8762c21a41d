"""The Activity page in headless Chromium: an action taken on the dashboard
shows up there with who did it, the filters work (htmx, URL kept), the
request and queue pages show the entries that touched them; screenshots at 1440x900 and
390x844, light and dark, with nothing wider than the screen."""
from __future__ import annotations

import subprocess
import sys

import pytest

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from tests.browser.conftest import _env, ROOT, shot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

MORE_ENTRIES = """
from queueadmin.core import audit
from queueadmin.core.audit import Actor
audit.record(Actor.command("queue_steer"), "pause_queue", queue="reports")
audit.record(Actor("token nightly-export (ci-bot)", "api"), "retry_dead", queue="default", request_id="{rid}",
             count=12, detail={{"entries": "all"}})
audit.record(Actor("admin", "admin"), "admin_change", queue="default", target="queue default",
             detail={{"model": "queue", "changes": [{{"changed": {{"fields": ["Priority", "Rate limit"]}}}}]}})
audit.record(Actor("admin", "dashboard"), "stop_item", queue="default", request_id="{rid}", target="#4812", count=1)
"""


@pytest.fixture(autouse=True)
def default_queue(redis_url):
    services.engine().define_queue("default", QueueConfig())


def login(chromium, dashboard, **options):
    context = chromium.new_context(base_url=dashboard, **options)
    pg = context.new_page()
    pg.errors = []
    pg.on("pageerror", lambda exc: pg.errors.append(str(exc)))
    pg.on("response", lambda r: pg.errors.append(f"HTTP {r.status} {r.url}") if r.status >= 500 else None)
    sign_in(pg, dashboard)
    return context, pg


def test_an_action_shows_on_the_activity_page_and_its_request(chromium, dashboard, submit_many, redis_url,
                                                             browser_db):
    [rid] = submit_many([{"queue": "default", "processor": "echo", "items": ["a", "b"], "delay": 3600}])
    context, pg = login(chromium, dashboard, viewport={"width": 1440, "height": 900})
    pg.goto(f"/requests/{rid}/")
    pg.fill("#prio-input", "88")
    pg.click("#request-actions button:text('Set priority')")
    pg.wait_for_selector("#request-activity td:has-text('set priority')")
    assert "→ 88" in pg.locator("#request-activity").inner_text()

    subprocess.run([sys.executable, "manage.py", "shell", "-c", MORE_ENTRIES.format(rid=rid)], cwd=ROOT,
                   env=_env(redis_url, browser_db), check=True, capture_output=True)
    pg.click("nav.sidebar a:text('Activity')")
    pg.wait_for_url("**/activity/")
    table = pg.locator("#activity-table tbody")
    first = table.locator("tr").first.inner_text()  # newest first (other tests may have left older ones)
    assert "stop item" in first and "#4812" in first
    pg.select_option("#id_source", "api")  # htmx: the table is swapped, the URL follows
    pg.wait_for_url("**/activity/?*source=api*")
    pg.wait_for_function("[...document.querySelectorAll('#activity-table tbody tr')]"
                         ".every(tr => tr.innerText.includes('api'))")
    assert "nightly-export" in table.inner_text() and "12" in table.inner_text()
    pg.goto("/activity/?action=set_priority")
    row = table.locator("tr").first
    assert "admin" in row.inner_text() and "dashboard" in row.inner_text()
    row.locator(f"a:text('{rid}')").click()
    pg.wait_for_url(f"**/requests/{rid}/")
    assert pg.locator("#request-activity tbody tr").count() == 3  # priority, the API's retry, the stop
    assert pg.errors == []
    context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshots_phone_and_desktop(chromium, dashboard, submit_many, redis_url, browser_db, scheme):
    [rid] = submit_many([{"queue": "default", "processor": "echo", "items": ["a"], "delay": 3600}])
    subprocess.run([sys.executable, "manage.py", "shell", "-c", MORE_ENTRIES.format(rid=rid)], cwd=ROOT,
                   env=_env(redis_url, browser_db), check=True, capture_output=True)
    for width, height in ((1440, 900), (390, 844)):
        context, pg = login(chromium, dashboard, viewport={"width": width, "height": height}, color_scheme=scheme)
        pg.goto("/activity/")
        pg.wait_for_selector("#activity-table tbody tr")
        assert pg.evaluate("document.documentElement.scrollWidth") <= width + 1
        shot(pg, f"activity-{width}-{scheme}")
        pg.goto(f"/requests/{rid}/")
        pg.wait_for_selector("#request-activity")
        assert pg.evaluate("document.documentElement.scrollWidth") <= width + 1
        shot(pg, f"activity-request-{width}-{scheme}")
        pg.goto("/queues/default/")
        pg.wait_for_selector("#queue-activity tbody tr")
        assert pg.evaluate("document.documentElement.scrollWidth") <= width + 1
        shot(pg, f"activity-queue-{width}-{scheme}")
        assert pg.errors == []
        context.close()
