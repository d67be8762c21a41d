"""Dashboard polish in headless Chromium: times in the viewer's time zone
(UTC on hover), live changes spoken through the status region, and the dark
theme following the system setting. Screenshots of the overview and a
request page, light and dark, go to screenshots/."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from tests.browser.conftest import shot, sign_in
from tests.engine_helpers import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DARK_BG = "rgb(14, 17, 22)"  # --bg of the dark theme
LIGHT_BG = "rgb(245, 246, 248)"


@pytest.fixture(autouse=True)
def default_queue(redis_url):
    services.engine().define_queue("default", QueueConfig())


@pytest.fixture
def open_page(chromium, dashboard):
    """A logged-in page with browser options (color_scheme, timezone_id)."""
    contexts = []

    def make(**options):
        context = chromium.new_context(viewport={"width": 1440, "height": 900}, base_url=dashboard, **options)
        contexts.append(context)
        pg = context.new_page()
        pg.errors = []
        pg.on("pageerror", lambda exc: pg.errors.append(str(exc)))
        pg.on("console", lambda msg: pg.errors.append(msg.text) if msg.type == "error"
              and not msg.text.startswith("Failed to load resource") else None)
        pg.on("response", lambda r: pg.errors.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)
        sign_in(pg, dashboard)
        return pg

    yield make
    for context in contexts:
        context.close()


def test_times_show_in_the_viewers_time_zone_with_utc_on_hover(open_page, submit_many):
    [rid] = submit_many([{"queue": "default", "processor": "echo", "items": ["a"], "delay": 3600}])
    pg = open_page(timezone_id="Asia/Kolkata")  # UTC+5:30, no daylight saving
    pg.goto(f"/requests/{rid}/")
    created = pg.locator("dl.kv time").first
    created.wait_for()
    pg.wait_for_selector("dl.kv time[data-local]")
    utc = datetime.strptime(created.get_attribute("datetime"), "%Y-%m-%dT%H:%M:%SZ")
    local = (utc + timedelta(hours=5, minutes=30)).strftime("%Y-%m-%d %H:%M:%S")
    assert created.inner_text() == f"{local} GMT+5:30"
    assert created.get_attribute("title") == utc.strftime("%Y-%m-%d %H:%M:%S") + " UTC"
    # relative times keep their text and show the moment on hover
    pg.goto("/requests/")
    ago = pg.locator("time[data-relative]").first
    ago.wait_for()
    pg.wait_for_selector("time[data-relative][data-local]")
    assert ago.inner_text().endswith("ago")
    assert "GMT+5:30" in ago.get_attribute("title") and ago.get_attribute("title").endswith(" UTC")
    assert not pg.errors, pg.errors


def test_a_request_finishing_is_announced_to_screen_readers(open_page, submit_many, worker_procs):
    [rid] = submit_many([{"queue": "default", "processor": "sleep", "items": ["0.05"] * 20, "concurrency": 2}])
    pg = open_page()
    pg.goto(f"/requests/{rid}/")
    region = pg.locator("#live-announcer")
    assert region.get_attribute("role") == "status" and region.get_attribute("aria-live") == "polite"
    assert region.inner_text() == ""  # the page as loaded is not news
    pg.wait_for_selector("#live-pill[data-state=open]", timeout=10_000)
    worker_procs.start(queues="default")
    wait_for(lambda: "completed" in region.text_content(), 60, message="an announcement of the completion")
    assert "20 of 20 items finished" in region.text_content()
    # the pushed fragment's times (now with Started and Finished) are local too
    wait_for(lambda: pg.locator("dl.kv time").count() >= 3, 10, message="started and finished times")
    assert pg.locator("time[datetime]:not([data-local])").count() == 0
    assert not pg.errors, pg.errors


def test_dark_theme_follows_the_system_setting_and_screenshots(open_page, submit_many, worker_procs):
    worker_procs.start(queues="default", processes=2)
    ids = submit_many([
        {"queue": "default", "processor": "echo", "items": [f"item {i}" for i in range(40)], "priority": 70},
        {"queue": "default", "processor": "fail", "items": ["boom"]},
        {"queue": "default", "processor": "echo", "items": ["later"], "delay": 900},
    ])
    for scheme, bg in (("light", LIGHT_BG), ("dark", DARK_BG)):
        pg = open_page(color_scheme=scheme)
        pg.goto("/")
        pg.wait_for_selector("#live-pill[data-state=open]", timeout=10_000)
        assert pg.evaluate("getComputedStyle(document.body).backgroundColor") == bg
        shot(pg, f"overview-{scheme}", full_page=False)
        pg.goto(f"/requests/{ids[0]}/")
        pg.wait_for_selector("#state:text('completed')", timeout=30_000)
        pg.wait_for_selector("dl.kv time[data-local]")
        shot(pg, f"request-{scheme}", full_page=False)
        assert not pg.errors, pg.errors
