"""Groups on a queue's page in a real Chromium (issue 23, part 1): a group
at its concurrency limit with work in flight, one with its own rate limit,
one waiting; the table fits the panel at 1440 and 390 wide, light and dark
(screenshots/groups-*.png)."""
from __future__ import annotations

import pytest

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from tests.browser.conftest import shot, sign_in

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def grouped(redis_url):
    eng = services.engine()
    eng.define_queue("tenants", QueueConfig(group_concurrency=2))
    eng.set_group_limits("tenants", "acme-corp", concurrency=5, rate_limit="100/min")
    eng.submit("tenants", "echo", [f"a{i}" for i in range(40)], group="acme-corp")
    for i in range(12):
        eng.submit("tenants", "echo", [f"g{i}"], group="globex", dedup=False)
    eng.submit("tenants", "echo", ["solo"], group="initech")
    return eng


@pytest.mark.parametrize("width,height,scheme", [(1440, 900, "light"), (390, 844, "dark")])
def test_the_groups_table_lists_each_group_and_fits(chromium, dashboard, grouped, width, height, scheme):
    context = chromium.new_context(viewport={"width": width, "height": height}, base_url=dashboard,
                                   color_scheme=scheme)
    pg = context.new_page()
    try:
        sign_in(pg, dashboard)
        pg.goto("/queues/tenants/")
        table = pg.locator("#groups-table")
        table.wait_for()
        rows = {r.get_attribute("data-group"): r.inner_text() for r in table.locator("tbody tr").all()}
        assert set(rows) == {"acme-corp", "globex", "initech"}
        assert "own limits" in rows["acme-corp"] and "100/min" in rows["acme-corp"]
        assert "12" in rows["globex"]
        panel = pg.locator("#queue-groups").bounding_box()
        box = table.bounding_box()
        scroller_fits = pg.evaluate(
            "() => { const t = document.querySelector('#groups-table');"
            " const s = t.parentElement; return t.getBoundingClientRect().right <= s.getBoundingClientRect().right + 1"
            " || getComputedStyle(s).overflowX === 'auto' || getComputedStyle(s).overflowX === 'scroll'; }")
        assert scroller_fits and box["x"] >= panel["x"] - 1
        shot(pg, f"groups-{width}-{scheme}")
    finally:
        context.close()
