"""Search and bulk by filter in headless Chromium: dead letters searched by
error text (the filter lands in the URL), "Retry all" confirms with N, the
bulk job's progress shows on the page until its result; the queue-level
clear confirms with N; the overview lists running and finished requests.
Screenshots at 1440x900 and 390x844, light and dark, nothing wider than the
screen. Dead letters are made directly through the engine (make_dead)."""
from __future__ import annotations

import pytest

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from tests.browser.conftest import shot, sign_in
from tests.engine.client.test_bulk import make_dead
from tests.engine_helpers import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]
SIZES = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}


@pytest.fixture
def eng(redis_url):
    client = services.engine()
    client.define_queue("default", QueueConfig())
    return client


@pytest.fixture
def open_page(chromium, dashboard):
    contexts = []

    def make(size="desktop", scheme="light"):
        context = chromium.new_context(viewport=SIZES[size], base_url=dashboard, color_scheme=scheme)
        contexts.append(context)
        pg = context.new_page()
        pg.errors = []
        pg.on("pageerror", lambda exc: pg.errors.append(str(exc)))
        pg.on("response", lambda r: pg.errors.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)
        sign_in(pg, dashboard)
        return pg

    yield make
    for context in contexts:
        context.close()


def fits(pg) -> bool:
    """Nothing wider than the screen (no sideways scrolling of the page)."""
    return pg.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


def test_search_dead_letters_and_retry_all_that_match_with_progress(open_page, eng):
    make_dead(eng, 900, error=lambda i: f"ReadTimeout: upstream took {i} ms" if i % 9 else "KeyError: 'sku'")
    make_dead(eng, 400, processor="uppercase", error=lambda i: "ValueError: bad input")
    pg = open_page()
    pg.goto("/dead/")
    pg.fill("#f-error", "timeout")
    pg.press("#f-error", "Enter")
    pg.wait_for_url("**/dead/?*error=timeout*")
    pg.wait_for_selector("#dead-table tbody tr[data-entry]")
    errors = pg.eval_on_selector_all("#dead-table .cell-err", "els => els.map(e => e.textContent)")
    assert errors and all("ReadTimeout" in e for e in errors)
    assert "800 matches" in pg.inner_text(".bulkbar .count")
    assert fits(pg)
    shot(pg, "bulk-dead-search-1440-light")

    pg.click("button[value=retry-all]")
    dialog = pg.wait_for_selector(".modal")
    assert "800" in dialog.inner_text() and "Retry 800 dead letters?" in dialog.inner_text()
    shot(pg, "bulk-dead-confirm-1440-light", full_page=False)
    pg.click(".modal button[type=submit]")
    pg.wait_for_selector("#bulk-progress")
    assert "bulk=" in pg.url
    pg.wait_for_selector("#bulk-progress[data-bulk-state=done]", timeout=60_000)
    note = pg.inner_text("#bulk-progress")
    assert "800 dead letters sent back to run" in note, note
    # once the job is over the list under the panel is shown anew: nothing of the search is dead any more
    pg.wait_for_function("document.querySelector('.bulkbar .count').textContent.includes('0 matches')")
    assert "800 dead letters sent back to run" in pg.inner_text("#bulk-progress")
    shot(pg, "bulk-dead-done-1440-light")
    assert not pg.errors, pg.errors

    for size, scheme in (("desktop", "dark"), ("phone", "light"), ("phone", "dark")):
        other = open_page(size, scheme)
        other.goto("/dead/?error=valueerror")
        other.wait_for_selector("#dead-table tbody tr[data-entry]")
        assert "400 matches" in other.inner_text(".bulkbar .count")
        assert fits(other), (size, scheme)
        shot(other, f"bulk-dead-search-{SIZES[size]['width']}-{scheme}", full_page=size == "desktop")
        assert not other.errors, other.errors


def test_clear_a_queue_and_the_overview_lists(open_page, eng, submit_many):
    eng.set_paused("default", True)
    rids = submit_many([{"queue": "default", "processor": "echo", "items": list(range(4)), "dedup": False}
                        for _ in range(3)])
    pg = open_page()
    pg.goto("/queues/")
    pg.click("button[aria-label='Clear queue default']")
    dialog = pg.wait_for_selector(".modal")
    assert "12 items not yet finished, in 3 live requests" in dialog.inner_text()
    shot(pg, "bulk-clear-confirm-1440-light", full_page=False)
    pg.click(".modal button[type=submit]")
    pg.wait_for_selector("#bulk-progress[data-bulk-state=done]")
    assert "3 requests cancelled" in pg.inner_text("#bulk-progress")
    assert "Bulk job" in pg.inner_text("h1") and "/bulk/" in pg.url
    assert all(eng.status(r)["state"] == "cancelled" for r in rids)
    shot(pg, "bulk-clear-done-1440-light")
    [running] = submit_many([{"queue": "default", "processor": "echo", "items": list(range(10)), "dedup": False}])
    eng.redis.hset(eng.keys.request(running).meta, mapping={"state": "running", "done": 4})  # as workers make it
    pg.goto("/")
    pg.wait_for_selector("#overview-recent a.id")
    assert "cancelled" in pg.inner_text("#overview-recent") and running in pg.inner_text("#overview-running")
    shot(pg, "bulk-overview-lists-1440-light")
    # long ids are cut with an ellipsis, so every column stays inside its panel at 1440
    assert pg.evaluate("[...document.querySelectorAll('#overview-requests .table-wrap')]"
                       ".every(w => w.scrollWidth <= w.clientWidth + 1)")
    assert not pg.errors, pg.errors
    phone = open_page("phone", "dark")
    phone.goto("/")
    phone.wait_for_selector("#overview-recent")
    assert fits(phone)
    phone.locator("#overview-requests").scroll_into_view_if_needed()
    shot(phone, "bulk-overview-lists-390-dark", full_page=False)
