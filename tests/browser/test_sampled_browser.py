"""The in-flight page over a queue of more live requests than it reads per
refresh (queries.base.started_meta), in a real Chromium: the item a worker
holds is listed, and the page says it read a sample; at 1440 and 390 wide
(screenshots/inflight-sampled-*.png)."""
from __future__ import annotations

import pytest

from queueadmin.core import services
from queueadmin.core.queries.base import SAMPLE
from tests.browser.conftest import shot, sign_in
from tests.engine.client.test_reads import ghost_take

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def past_the_sample(redis_url):
    eng = services.engine()
    eng.define_queue("default")
    for i in range(SAMPLE + 1):  # waiting requests, older than the one taken (of two items: one-item
        eng.submit("default", "echo", [i, -i], priority=10, dedup=False)  # ones waiting packed are not sampled)
    late = eng.submit("default", "echo", ["late"], priority=90, dedup=False).id
    rid, _ = ghost_take(eng, "default")
    assert rid == late
    return late


@pytest.mark.parametrize("width,height", [(1440, 900), (390, 844)])
def test_the_in_flight_page_lists_the_held_item_and_says_it_samples(chromium, dashboard, past_the_sample,
                                                                    width, height):
    context = chromium.new_context(viewport={"width": width, "height": height}, base_url=dashboard)
    pg = context.new_page()
    try:
        sign_in(pg, dashboard)
        pg.goto("/inflight/")
        pg.locator("#inflight-table").wait_for()
        assert past_the_sample in pg.locator("#inflight-table tbody").inner_text()
        note = pg.locator(".sampled-note").first
        assert note.is_visible() and f"oldest {SAMPLE:,}" in note.inner_text()
        shot(pg, f"inflight-sampled-{width}")
    finally:
        context.close()
