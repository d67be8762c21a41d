"""The history charts in a real Chromium (issue 22, items 1 and 2): the
overview's and a queue's page's charts across every range, switched by
htmx without a reload and by plain links without it; values on hover;
latency beside each queue; screenshots at 1440x900 and 390x844, light and
dark (screenshots/charts-*.png)."""
from __future__ import annotations

import math
import random
import time

import pytest

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.features import history
from queueadmin.core.engine.features.stats import RUN_BUCKETS, WAIT_BUCKETS
from queueadmin.core.engine.store import Store
from queueadmin.core.queries import charts
from tests.browser.conftest import shot, sign_in

pytestmark = pytest.mark.timeout(240)


def fortnight(queue: str, store: Store, seed: int = 7) -> None:
    """Fourteen days of plausible per-minute points (a daily wave, a failure
    burst, a slow afternoon), written at injected times as workers would."""
    rnd = random.Random(seed)
    now = int(time.time() // 60)
    trip = store.trip()
    for m in range(now - 14 * 1440, now + 1):
        if now - m > 1440 and m % 7:  # past a day, a point every 7 minutes is enough for hourly charts
            continue
        wave = 1 + math.sin((m % 1440) / 1440 * 2 * math.pi)
        p = history.Point(done=int(40 * wave + rnd.randint(0, 20)), failed=rnd.randint(0, 3))
        if 300 < now - m < 360:
            p.failed += 25
        slow = 2 if 600 < now - m < 900 else 0
        for _ in range(8):
            p.run[min(len(RUN_BUCKETS), 5 + rnd.randint(0, 3) + slow)] += 1
            p.wait[min(len(WAIT_BUCKETS), 7 + rnd.randint(0, 3) + slow)] += 1
        p.run_ms = int(p.done * 180)
        p.max_wait_ms = int(1000 * (0.5 + rnd.random() * (8 if slow else 2)))
        history.write(store, history.queue_series(queue), m, p, trip)
        history.write(store, history.ALL, m, p, trip)  # workers add every point to the overview's series too
        if len(trip.pipe.command_stack) > 500:
            trip.run()
            trip = store.trip()
    trip.run()


@pytest.fixture
def filled(redis_url):
    eng = services.engine()
    eng.define_queue("default", QueueConfig())
    eng.define_queue("mail", QueueConfig())
    store = Store(eng.redis, prefix=eng.keys.prefix)
    fortnight("default", store)
    fortnight("mail", store, seed=11)
    eng.submit("default", "echo", ["waiting"] * 3)  # no worker: they wait, latency grows
    return eng


def test_charts_across_ranges_with_hover_and_latency(page, filled):
    time.sleep(1.2)
    page.goto("/")
    assert page.locator("#charts svg.hchart-svg").count() == 4
    latency = page.locator('tr[data-queue="default"] [data-latency]')
    assert float(latency.get_attribute("data-latency")) >= 1.0
    shot(page, "charts-overview-1440-light")
    for rng in charts.RANGES:
        page.click(f'#charts .range-switch a:text-is("{rng}")')
        page.wait_for_selector(f'#charts .range-switch a.on:text-is("{rng}")')
        assert page.url.endswith(f"?range={rng}")  # pushed: a reload keeps the range
        bars = page.locator("#charts figure[data-chart=done-and-failed] rect.s-done").count()
        assert bars >= charts.RANGES[rng].minutes // charts.RANGES[rng].step // 2, (rng, bars)
        assert page.locator("#charts figure[data-chart=queue-latency] polyline").count() >= 1
    title = page.locator("#charts figure[data-chart=done-and-failed] .hits rect title").last.text_content()
    assert "(now)" in title and "done:" in title and "failed:" in title
    page.goto("/queues/")
    page.click('a.queue-name:text-is("default")')
    page.wait_for_url("**/queues/default/")
    first = page.locator('[data-stat="latency"]').text_content().strip()
    assert first.endswith("s")
    page.wait_for_function("(before) => document.querySelector('[data-stat=latency]').textContent.trim() != before",
                           arg=first, timeout=15_000)  # live: the tiles refresh, the items still wait
    page.click('#charts .range-switch a:text-is("7d")')
    page.wait_for_selector('#charts .range-switch a.on:text-is("7d")')
    shot(page, "charts-queue-1440-light")
    assert not page.errors, page.errors


def test_the_range_switch_works_as_links_without_javascript(chromium, dashboard, filled):
    context = chromium.new_context(viewport={"width": 1440, "height": 900}, base_url=dashboard,
                                   java_script_enabled=False)
    pg = context.new_page()
    sign_in(pg, dashboard)
    pg.goto("/queues/default/")
    pg.click('#charts .range-switch a:text-is("24h")')
    pg.wait_for_url("**/queues/default/?range=24h")
    assert pg.locator('#charts .range-switch a.on').text_content() == "24h"
    context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_screenshots_phone_and_desktop(chromium, dashboard, filled, scheme):
    for width, height in ((1440, 900), (390, 844)):
        context = chromium.new_context(viewport={"width": width, "height": height}, base_url=dashboard,
                                       color_scheme=scheme)
        pg = context.new_page()
        sign_in(pg, dashboard)
        pg.goto("/queues/default/?range=24h")
        pg.wait_for_selector("#charts svg.hchart-svg")
        # nothing wider than the screen: the page does not scroll sideways
        assert pg.evaluate("document.documentElement.scrollWidth") <= width + 1
        shot(pg, f"charts-queue-{width}-{scheme}")
        pg.goto("/?range=6h")
        pg.wait_for_selector("#charts svg.hchart-svg")
        shot(pg, f"charts-overview-{width}-{scheme}")
        context.close()
