"""Workers and the rough edges in headless Chromium (issue 22, items 7 and
8): quiet and stop a real worker process from the workers page through its
confirmation; buttons inside their panels and not cut at 1440x900 (the
overview's Pause, the in-flight page's Requeue and Stop); no sideways
scrolling at 390x844 and the request filters folded; the admin in the
dashboard's colours. Screenshots, light and dark, go to screenshots/."""
from __future__ import annotations

import pytest

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from tests.browser.conftest import playwrights_own_style, shot, sign_in
from tests.engine_helpers import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DESKTOP, PHONE = (1440, 900), (390, 844)
LONG = "a payload long enough to fill its cell " * 6


@pytest.fixture(autouse=True)
def default_queue(redis_url):
    services.engine().define_queue("default", QueueConfig())


@pytest.fixture
def open_page(chromium, dashboard):
    """A signed-in page at a size and colour scheme."""
    contexts = []

    def make(size=DESKTOP, scheme="light"):
        context = chromium.new_context(viewport={"width": size[0], "height": size[1]}, base_url=dashboard,
                                       color_scheme=scheme)
        contexts.append(context)
        pg = context.new_page()
        pg.errors = []
        pg.on("pageerror", lambda exc: pg.errors.append(str(exc)))
        pg.on("console", lambda msg: pg.errors.append(msg.text) if msg.type == "error"
              and not msg.text.startswith("Failed to load resource") and not playwrights_own_style(msg.text)
              else None)
        sign_in(pg, dashboard)
        return pg

    yield make
    for context in contexts:
        context.close()


def inside(pg, element: str, container: str) -> int:
    """Every `element` lies within its closest `container`, its text not cut; returns how many."""
    found = pg.eval_on_selector_all(element, """(els, container) => els.map(el => {
        const box = el.getBoundingClientRect(), outer = el.closest(container).getBoundingClientRect();
        return {box: [box.left, box.right, box.top, box.bottom], outer: [outer.left, outer.right, outer.top, outer.bottom],
                cut: el.scrollWidth > el.clientWidth + 1, text: el.innerText};
    })""", container)
    for one in found:
        (left, right, top, bottom), (o_left, o_right, o_top, o_bottom) = one["box"], one["outer"]
        assert o_left <= left and right <= o_right and o_top <= top and bottom <= o_bottom, (element, one)
        assert not one["cut"] and one["text"] in ("Pause", "Resume", "Requeue", "Stop", "Quiet"), (element, one)
    return len(found)


def no_sideways_scroll(pg) -> None:
    widths = pg.evaluate("""() => ({doc: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
        nav: [...document.querySelectorAll('.sidebar')].map(n => [n.scrollWidth, n.clientWidth])})""")
    if widths["doc"][0] > widths["doc"][1]:
        widths["wide"] = pg.evaluate("""() => [...document.querySelectorAll('body *')].filter(e => !e.closest('.table-wrap') && e.getBoundingClientRect().right > document.documentElement.clientWidth + 1).slice(0, 8).map(e => e.tagName + '.' + e.className + '#' + e.id + ' ' + Math.round(e.getBoundingClientRect().right) + ' ' + getComputedStyle(e).overflowX)""")
    assert widths["doc"][0] <= widths["doc"][1], widths
    assert all(s <= c for s, c in widths["nav"]), widths


def test_quiet_and_stop_worker_processes_from_the_workers_page(open_page, worker_procs, submit_many):
    quiet_proc, stop_proc = worker_procs.start(), worker_procs.start()
    pg = open_page()
    pg.goto("/workers/")
    pg.wait_for_function("document.querySelectorAll('#workers-table tr[data-worker]').length == 2", timeout=20_000)
    rows = {pg.inner_text(f"#workers-table tr[data-worker]:nth-child({i}) [data-worker-name]"): i for i in (1, 2)}
    quiet_name = next(n for n in rows if n.endswith(f":{quiet_proc.pid}"))
    stop_name = next(n for n in rows if n.endswith(f":{stop_proc.pid}"))
    row = pg.locator("#workers-table tr[data-worker]", has_text=quiet_name)
    row.get_by_role("button", name="Quiet").click()
    pg.wait_for_selector(".modal")
    text = pg.inner_text(".modal")
    assert f"Quiet worker {quiet_name}" in text and "stays alive" in text
    assert pg.locator(".modal [data-confirm-count]").count() == 0  # no giant number for one worker
    shot(pg, "workers-quiet-dialog-light", full_page=False)
    pg.click(".modal button[type=submit]")
    row = pg.locator("#workers-table tr[data-worker]", has_text=quiet_name)
    row.locator(".badge", has_text="quiet").wait_for(timeout=15_000)
    assert row.get_by_role("button", name="Quiet").count() == 0
    pg.locator("#workers-table tr[data-worker]", has_text=stop_name).get_by_role("button", name="Stop").click()
    pg.wait_for_selector(".modal")
    assert "finishes the items it runs" in pg.inner_text(".modal")
    pg.click(".modal button[type=submit]")
    assert stop_proc.wait(20) == 0
    pg.locator("#workers-table tr[data-worker]", has_text=stop_name).wait_for(state="detached", timeout=15_000)
    assert quiet_proc.poll() is None  # quiet: alive, taking nothing
    ids = submit_many([{"queue": "default", "processor": "echo", "items": ["x"] * 5}])
    shot(pg, "workers-quiet-light", full_page=False)
    for size, scheme in ((DESKTOP, "dark"), (PHONE, "light"), (PHONE, "dark")):
        other = open_page(size, scheme)
        other.goto("/workers/")
        other.locator(".badge", has_text="quiet").wait_for()
        no_sideways_scroll(other)
        shot(other, f"workers-quiet-{scheme}-{size[0]}", full_page=False)
        assert not other.errors, other.errors
    assert services.engine().status(ids[0])["done"] == 0
    worker_procs.start()
    wait_for(lambda: services.engine().status(ids[0])["state"] == "completed", 30, message="nothing lost")
    assert not pg.errors, pg.errors


def test_buttons_sit_inside_their_panels_at_1440(open_page, worker_procs, submit_many):
    services.engine().define_queue("a-rather-long-queue-name", QueueConfig())
    services.engine().define_queue("slowretry", QueueConfig(backoff_seconds=600, backoff_max_seconds=600))
    worker_procs.start(queues="default,slowretry")
    submit_many([{"queue": "default", "processor": "sleep", "items": [20] * 3, "concurrency": 3},
                 {"queue": "slowretry", "processor": "fail", "items": [LONG] * 2},  # wait to retry: long rows
                 {"queue": "a-rather-long-queue-name", "processor": "echo", "items": ["x"] * 3, "delay": 600}])
    for scheme in ("light", "dark"):
        pg = open_page(DESKTOP, scheme)
        pg.goto("/")
        pg.wait_for_selector("tr[data-queue='a-rather-long-queue-name'] .queue-pause button")
        assert inside(pg, ".queue-pause button", ".panel") == 3
        shot(pg, f"overview-pause-{scheme}", full_page=False)
        pg.goto("/inflight/")
        pg.wait_for_function("document.querySelectorAll('#inflight-table button[form=stop-form]').length >= 3",
                             timeout=20_000)
        pg.wait_for_selector("#inflight-table .cell-err")
        assert inside(pg, "#inflight-table button[form=one-form]", ".panel") == 5
        assert inside(pg, "#inflight-table button[form=stop-form]", ".panel") >= 3
        no_sideways_scroll(pg)
        shot(pg, f"inflight-buttons-{scheme}", full_page=False)
        assert not pg.errors, pg.errors


def test_a_phone_scrolls_no_page_sideways_and_folds_the_request_filters(open_page, submit_many):
    ids = submit_many([{"queue": "default", "processor": "echo", "items": [LONG] * 3}])
    for scheme in ("light", "dark"):
        pg = open_page(PHONE, scheme)
        for url in ("/", "/submit/", "/requests/", f"/requests/{ids[0]}/", "/inflight/", "/dead/", "/scheduled/",
                    "/workers/", "/queues/"):
            pg.goto(url)
            pg.wait_for_load_state("networkidle")
            no_sideways_scroll(pg)
        pg.goto("/requests/")
        assert not pg.is_visible("#id_priority_min")
        height = pg.eval_on_selector("form.filters", "f => f.getBoundingClientRect().height")
        assert height < PHONE[1] / 3, height  # the filters no longer fill the first screen
        shot(pg, f"requests-phone-{scheme}", full_page=False)
        pg.click("label[for=more-filters]")
        assert pg.is_visible("#id_priority_min")
        pg.fill("#id_priority_min", "10")
        pg.press("#id_priority_min", "Enter")
        pg.wait_for_function("() => location.search.includes('priority_min=10')")
        pg.wait_for_timeout(300)  # the swap after the push
        assert pg.is_visible("#id_priority_min")  # an active filter keeps them unfolded
        assert not pg.errors, pg.errors


def test_the_admin_wears_the_dashboards_colours(open_page):
    for scheme, header in (("light", "rgb(22, 26, 35)"), ("dark", "rgb(10, 12, 16)")):
        for size in (DESKTOP, PHONE):
            pg = open_page(size, scheme)
            pg.goto("/admin/queueadmin/apitoken/add/")
            assert pg.evaluate("getComputedStyle(document.getElementById('header')).backgroundColor") == header
            assert pg.is_checked("input[name=scopes][value=read]")
            assert pg.is_visible("a.qa-dashboard")
            shot(pg, f"admin-token-{scheme}-{size[0]}", full_page=False)
            pg.goto("/admin/")
            shot(pg, f"admin-index-{scheme}-{size[0]}", full_page=False)
            assert not pg.errors, pg.errors
