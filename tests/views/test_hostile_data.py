"""No item, result, cursor or record breaks a page, an API call or a count
(issue 20): a dead letter nested 900 levels deep on the Dead letters and
request pages; the preview/pretty filters deep in a template stack; API list
cursors nested deep, at the calendar's edge or with a lone surrogate; item
cursors out of Redis's range on the request page; a stored record holding
NaN in a results download; the dead-letter gauge and `queue_status`
counting finished requests' dead letters as the page does. Real
redis-server, test database, the in-process burst worker."""
from __future__ import annotations

import base64
import io
import json
import logging
import re

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from queueadmin.core import services
from queueadmin.core.engine.client import limits
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.models import ApiToken
from queueadmin.core.templatetags.queueadmin import pretty, preview
from tests.api_helpers import Api, token_for
from tests.engine_helpers import burst

pytestmark = pytest.mark.django_db


def deep(n, leaf="x"):
    out = leaf
    for _ in range(n):
        out = [out]
    return out


def legacy_submit(eng, items, monkeypatch, **kw) -> str:
    """A request stored as an older version took it (no depth limit then)."""
    monkeypatch.setattr(limits, "MAX_DEPTH", 10_000)
    try:
        return services.submit("fast", "echo", items, **kw).id
    finally:
        monkeypatch.undo()


# -- pages ------------------------------------------------------------------------------


def test_a_900_deep_dead_letter_leaves_the_pages_working(staff, eng, monkeypatch, caplog):
    rid = legacy_submit(eng, [deep(900), "fine"], monkeypatch, dedup=False)
    burst(eng, ["fast"], on_finish=services.record)  # echo's result is as deep: it cannot be stored, the item dies
    st = eng.status(rid)
    assert (st["done"], st["failed"]) == (1, 1)
    with caplog.at_level(logging.ERROR):
        for url, params in [(reverse("queueadmin:dead"), {}), (reverse("queueadmin:dead"), {"request": rid}),
                            (reverse("queueadmin:request_detail", args=[rid]), {}),
                            (reverse("queueadmin:requests"), {}), (reverse("queueadmin:inflight"), {})]:
            response = staff.get(url, params)
            assert response.status_code == 200, (url, response.status_code)
    page = staff.get(reverse("queueadmin:dead")).content.decode()
    assert "[[[[" in page and "nested too deeply" in page
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_the_filters_never_raise_and_stay_bounded():
    def at_depth(n, fn):  # as deep in the stack as a template renders
        return fn() if n == 0 else at_depth(n - 1, fn)

    for value in (deep(5000), {"a": deep(3000)}, list(range(100_000)), "x" * 10**6, "\ud800", float("nan"),
                  {1: {2: 3}}, object()):
        short = at_depth(800, lambda: preview(value, 60))
        assert isinstance(short, str) and len(short) <= 60
        long = at_depth(800, lambda: pretty(value))
        assert isinstance(long, str) and len(long) <= 200_010
        (short + long).encode("utf-8")  # the page can be encoded
    assert preview({"k": [1, 2]}) == '{"k": [1, 2]}' and pretty([1]) == "[\n  1\n]"
    assert preview(deep(40), 400).count("[") == 33 and "…" in preview(deep(40), 400)


def test_a_bad_item_cursor_shows_the_first_page_without_a_traceback(staff, eng, caplog):
    rid = services.submit("default", "echo", [f"i{n}" for n in range(60)]).id
    url = reverse("queueadmin:request_detail", args=[rid])
    with caplog.at_level(logging.WARNING):
        for params in ({"after": "99999999999999999999-1"}, {"before": "$"}, {"before": "0-0"},
                       {"after": "18446744073709551615-18446744073709551615"}, {"after": "1-2-3"},
                       {"before": "18446744073709551616-0"}, {"after": "$"}, {"after": "0-0"}):
            response = staff.get(url, params)
            assert response.status_code == 200, (params, response.status_code)
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert "i0" in staff.get(url, {"before": "$"}).content.decode()


# -- the API ----------------------------------------------------------------------------


def cursor(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def test_api_list_cursors_give_400_never_500(eng):
    api = Api(token_for("reader"))
    services.submit("default", "echo", ["a"])
    nested = "[" * 5000 + "]" * 5000
    for bad in [base64.urlsafe_b64encode(nested.encode()).decode(), cursor(["9999-12-31T23:59:59-14:00", "x"]),
                cursor(["0001-01-01T00:00:00+14:00", "x"]), cursor(["0001-01-01T00:00:00", "x"]),
                cursor(["2025-01-01T00:00:00", "\ud800"]), cursor(["2025-01-01T00:00:00", "a\n"]),
                cursor(["2025-01-01T00:00:00", "x" * 40]), cursor([1, 2]), cursor({"a": 1}), "x" * 5000, "!!!"]:
        for url in ("/api/v1/requests", "/api/v1/queues"):
            response = api.client.get(url, {"cursor": bad}, headers={"Authorization": f"Bearer {api.key}"})
            assert response.status_code in (200, 400), (url, bad[:40], response.content[:200])
            if url.endswith("requests"):
                assert response.status_code == 400 and response.json()["code"] == "invalid"
    good = api.client.get("/api/v1/requests", {"cursor": cursor(["2999-01-01T00:00:00", "zz"])},
                          headers={"Authorization": f"Bearer {api.key}"})
    assert good.status_code == 200 and len(good.json()["requests"]) == 1


def test_results_are_standard_json_even_for_a_record_stored_with_nan(eng, staff):
    api = Api(token_for("reader"))
    rid = services.submit("default", "echo", ["a", "b"], dedup=False).id
    burst(eng)
    eng.redis.hset(eng.keys.request(rid).results, 1, '{"status":"done","result":NaN,"attempts":1}')  # an old record
    body = b"".join(api.get(f"/api/v1/requests/{rid}/results").streaming_content)
    lines = [json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in the results")) for line in
             body.splitlines()]
    assert lines[0]["result"] == "a" and lines[1]["status"] == "corrupt"
    page = b"".join(staff.get(reverse("queueadmin:request_results", args=[rid])).streaming_content)
    assert [json.loads(line, parse_constant=lambda c: pytest.fail(c))["status"] for line in page.splitlines()] \
        == ["done", "corrupt"]


# -- dead letters counted as the page counts them ---------------------------------------


def test_the_dead_letter_gauge_and_queue_status_count_finished_requests(eng, staff, settings):
    rids = [services.submit("fast", "fail", [f"{n}-{i}" for i in range(3)], dedup=False).id for n in range(2)]
    burst(eng, ["fast"], on_finish=services.record)
    assert all(eng.status(r)["state"] == "failed" for r in rids)  # finished: no longer live requests
    page = staff.get(reverse("queueadmin:dead"), {"queue": "fast"}).content.decode()
    assert "6 dead letter" in page or page.count("always fails") >= 6
    key = ApiToken.issue(User.objects.create_user("prometheus"), scopes=("metrics",))[1]
    text = staff.get("/metrics", headers={"Authorization": f"Bearer {key}"}).content.decode()
    gauge = {s.labels["queue"]: s.value for f in text_string_to_metric_families(text)
             if f.name == "queueadmin_queue_dead_letters" for s in f.samples}
    assert gauge["fast"] == 6
    out = io.StringIO()
    call_command("queue_status", "--json", stdout=out)
    assert {q["queue"]: q["dead_letters"] for q in json.loads(out.getvalue())["queues"]}["fast"] == 6


# -- one check at every entry point ------------------------------------------------------


@pytest.mark.parametrize("line,why", [("NaN", "holds NaN or Infinity"), ('{"x": [Infinity]}', "holds NaN or Infinity"),
                                      ("[" * 65 + "]" * 65, "nested too deeply (more than 64 levels"),
                                      ("[" * 5000 + "]" * 5000, None)])
def test_nan_infinity_and_depth_are_refused_at_every_entry_point(eng, staff, line, why, tmp_path):
    """The form, queue_submit --json, the Python client, the API and the
    periodic admin refuse the same values, with the same words (the API's
    parser refuses NaN as malformed JSON, as it always did; a line too deep
    for the JSON parser itself is malformed wherever it is parsed); nothing
    reaches Redis. Django Tasks: tests/test_inputs_property.py."""
    from django.core.management.base import CommandError

    from queueadmin.core.engine.errors import QueueError

    before = set(eng.live_requests("default"))
    page = staff.post(reverse("queueadmin:submit"), {"queue": "default", "processor": "echo", "items": line,
                                                     "json_items": "on"}).content.decode()
    # too deep for the JSON parser on Python 3.11 and 3.12; 3.13's parses it, and the depth check refuses it
    assert (why or "not valid JSON") in page or (why is None and "nested too deeply" in page)
    path = tmp_path / "items.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(CommandError, match=re.escape(why) if why else "not JSON|nested too deeply"):
        call_command("queue_submit", str(path), processor="echo", json=True, stdout=io.StringIO())
    response = Api(token_for("submitter")).post("/api/v1/requests", raw=f'{{"queue": "default", "processor": '
                                                f'"echo", "items": [{line}]}}')
    assert response.status_code == 400
    if why is None:
        assert response.json()["code"] == "malformed_json" or "nested too deeply" in response.json()["error"]
    else:
        assert response.json()["code"] == "malformed_json" if "NaN" in why else why in response.json()["error"]
    admin = staff.post(reverse("admin:queueadmin_periodicrequest_add"), {
        "name": "p", "enabled": "on", "queue": "default", "processor": "echo", "items": line, "items_are_json": "on",
        "cron": "", "interval_seconds": 3600, "timezone": "UTC", "catch_up": "once", "_save": "Save"})
    assert admin.status_code == 200 and (why or "nested too deeply") in admin.content.decode()
    if why is not None:
        value = json.loads(line)
        with pytest.raises(QueueError, match=re.escape(why)):
            eng.submit("default", "echo", [value])
    assert set(eng.live_requests("default")) == before
