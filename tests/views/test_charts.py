"""The history charts and queue latency on the dashboard (issue 22, items 1
and 2): the overview and a queue's page draw the metrics history that real
workers wrote, at every range; latency shows on the overview and queues
pages; a range or queue that is not one is a 4xx, never a 500. Real
redis-server, Django test client."""
from __future__ import annotations

import re
import time

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings, strategies as st

from queueadmin.core import services
from queueadmin.core.engine.features import history
from queueadmin.core.engine.store import Store
from queueadmin.core.queries import charts
from tests.engine_helpers import burst

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


def run_some(eng, n=5):
    rid = services.submit("default", "echo", [str(i) for i in range(n)]).id
    burst(eng, ["default"])
    return rid


def hover_texts(html: str) -> list[str]:
    return re.findall(r"<title>([^<]*)</title>", html)


@pytest.mark.parametrize("rng", list(charts.RANGES))
def test_the_overview_and_the_queue_page_chart_what_workers_did_at_every_range(staff, eng, rng):
    run_some(eng, 5)
    for url in (reverse("queueadmin:overview") + f"?range={rng}",
                reverse("queueadmin:queue_detail", args=["default"]) + f"?range={rng}"):
        html = staff.get(url).content.decode()
        assert html.count('class="hchart-svg"') == 4, url
        assert f'class="on" aria-current="true">{rng}</a>' in html
        assert "5 done" in html  # the panel's total over the range
        now = [t for t in hover_texts(html) if "(now)" in t]
        assert any("done: 5" in t for t in now) or rng not in ("15m", "1h"), now  # per minute, at the right edge


def test_the_charts_partial_is_polled_and_switched_without_a_reload(staff, eng):
    run_some(eng, 3)
    html = staff.get(reverse("queueadmin:charts") + "?range=6h", **HTMX).content.decode()
    assert html.startswith("<section") or html.lstrip().startswith("<section")
    assert 'hx-trigger="every 5s"' in html and 'hx-get="/charts/?range=6h"' in html
    assert 'href="/?range=24h"' in html  # without JS the switch is a link to the page
    queue = staff.get(reverse("queueadmin:queue_charts", args=["default"]) + "?range=15m", **HTMX)
    assert queue.status_code == 200 and "History" in queue.content.decode()


def test_a_queue_page_shows_latency_and_percentiles(staff, eng):
    run_some(eng, 4)
    services.submit("default", "echo", ["waiting"])
    time.sleep(1.1)
    html = staff.get(reverse("queueadmin:queue_detail", args=["default"])).content.decode()
    latency = re.search(r'data-stat="latency"[^>]*>([^<]*)<', html)[1]
    assert latency.endswith(" s") and float(latency.split()[0]) >= 1
    assert "Wait p50" in html and "Run p50" in html
    assert 'hx-select="#queue-tiles" hx-trigger="every 5s"' in html  # the figures refresh themselves too


def test_latency_shows_on_the_overview_and_the_queues_page(staff, eng):
    services.submit("default", "echo", ["a"])
    time.sleep(1.1)
    for name in ("overview", "queues"):
        html = staff.get(reverse(f"queueadmin:{name}")).content.decode()
        assert ">Latency</th>" in html or "oldest " in html
        value = float(re.search(r'<tr data-queue="default">.*?data-latency="([0-9.]+)"', html, re.S)[1])
        assert 1.0 <= value < 60
        assert reverse("queueadmin:queue_detail", args=["default"]) in html  # the queue's name links to its page


def test_unknown_queue_is_404_and_bad_range_400(staff, eng):
    assert staff.get(reverse("queueadmin:queue_detail", args=["nope"])).status_code == 404
    assert staff.get(reverse("queueadmin:queue_charts", args=["nope"])).status_code == 404
    assert staff.get(reverse("queueadmin:charts") + "?range=3y").status_code == 400
    page = staff.get(reverse("queueadmin:queue_detail", args=["default"]) + "?range=3y")
    assert page.status_code == 400 and "range must be one of" in page.content.decode()
    assert staff.get(reverse("queueadmin:overview") + "?range=3y").status_code == 200  # the overview shows 1 h


def test_the_charts_are_for_staff_only(client, eng):
    assert client.get(reverse("queueadmin:charts")).status_code == 302  # to the login page


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(rng=st.one_of(st.sampled_from(list(charts.RANGES)), st.text(max_size=20)),
       queue=st.one_of(st.just("default"), st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                                                           blacklist_characters="/\x00"),
                                                   min_size=1, max_size=30)))
def test_any_range_and_queue_get_a_page_or_a_4xx(staff, eng, rng, queue):
    for url in (reverse("queueadmin:queue_detail", args=[queue]), reverse("queueadmin:queue_charts", args=[queue]),
                reverse("queueadmin:charts")):
        response = staff.get(url, {"range": rng})
        assert response.status_code in (200, 400, 404), (url, rng, response.status_code)
        if rng in charts.RANGES and queue == "default":
            assert response.status_code == 200


def test_history_read_for_an_injected_fortnight_fills_the_14_day_chart(staff, eng):
    store = Store(eng.redis, prefix=eng.keys.prefix)
    now = int(time.time() // 60)
    for m in range(now - 14 * 1440 + 60, now + 1, 180):  # a point every 3 hours for 14 days
        history.write(store, history.queue_series("default"), m, history.Point(done=60, failed=6))
    html = staff.get(reverse("queueadmin:queue_detail", args=["default"]) + "?range=14d").content.decode()
    bars = re.findall(r'<rect class="s-done"', html)
    assert len(bars) >= 100  # one bar per 2-hour point that has any
