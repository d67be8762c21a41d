"""Dashboard polish, server side: moments are <time> elements in UTC (the
browser shows them in the viewer's zone, static/queueadmin/time.js), live summaries
are marked for the screen-reader status region, and the scripts doing both
are files (no inline script: strict CSP). The browser side is
tests/browser/test_polish_browser.py."""
from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from queueadmin.core import services
from queueadmin.core.templatetags.queueadmin import when, when_ago

pytestmark = pytest.mark.django_db


@pytest.fixture
def submitted(redis_url):
    services.sync_queues()
    return services.submit("default", "echo", ["a", "b"], delay=600)


def test_when_renders_a_utc_time_element():
    moment = datetime(2025, 1, 31, 14, 5, 9, tzinfo=timezone.utc)
    html = str(when(moment.timestamp()))
    assert html == ('<time datetime="2025-01-31T14:05:09Z" title="2025-01-31 14:05:09 UTC">'
                    '2025-01-31 14:05:09 UTC</time>')
    assert str(when(moment)) == html  # a datetime from the database too
    assert when(None) == when("") == when("garbage") == "—"
    rel = str(when_ago(moment.timestamp()))
    assert rel.startswith('<time datetime="2025-01-31T14:05:09Z" data-relative title="2025-01-31 14:05:09 UTC">')
    assert rel.endswith(" ago</time>")


def test_request_page_times_and_announcements(admin_client, submitted):
    html = admin_client.get(f"/requests/{submitted.id}/").content.decode()
    times = re.findall(r'<time datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)" title="([^"]+) UTC">', html)
    assert len(times) >= 2  # created, not before
    assert all(iso.replace("T", " ").rstrip("Z") == title for iso, title in times)
    assert 'id="live-announcer" class="sr-only" role="status" aria-live="polite"' in html
    assert re.search(r'id="state" data-announce-now>scheduled<', html)
    assert "data-announce>" in html  # the "n of N items finished" summary


@pytest.mark.parametrize("url", ["/", "/requests/", "/workers/", "/inflight/", "/dead/", "/scheduled/"])
def test_pages_load_the_scripts_as_files_and_mark_live_summaries(admin_client, redis_url, url):
    services.sync_queues()
    html = admin_client.get(url).content.decode()
    for script in ("queueadmin/time.js", "queueadmin/announce.js"):
        assert re.search(rf'<script src="[^"]*{re.escape(script)}" defer></script>', html), script
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "an inline script"
    assert " on" + "click=" not in html
    if url != "/requests/":
        assert "data-announce" in html
