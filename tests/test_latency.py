"""Queue latency (issue 22, item 2) everywhere an operator or an autoscaler
reads it: the API's queue list and a queue by name (with the last hour's
wait and run percentiles from the metrics history), the Prometheus gauge
queueadmin_queue_latency_seconds, and `queue_status` in text and JSON.
Real redis-server; the latency is of items that really wait."""
from __future__ import annotations

import io
import json
import time
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from hypothesis import HealthCheck, given, settings, strategies as st
from prometheus_client.parser import text_string_to_metric_families

from queueadmin.core import services
from queueadmin.core.models import ApiToken
from tests.engine_helpers import burst

pytestmark = pytest.mark.django_db


def waiting_for(seconds: float = 1.1) -> None:
    services.submit("default", "echo", ["a", "b"])
    services.submit("default", "echo", ["later"], delay=600)  # scheduled: not waiting
    time.sleep(seconds)


def test_the_api_lists_latency_and_shows_one_queue(engine, api):
    services.submit("default", "echo", ["x", "y", "z"])
    burst(engine, ["default"])  # the history now has the last hour's waits and runs
    waiting_for()
    (default,) = [q for q in api.get("/api/v1/queues").json()["queues"] if q["name"] == "default"]
    assert 1.0 <= default["latency"] < 60 and default["oldest_waiting_at"] <= time.time() - 1
    one = api.get("/api/v1/queues/default")
    assert one.status_code == 200
    body = one.json()
    assert body["name"] == "default" and 1.0 <= body["latency"] < 60
    assert body["done_last_hour"] == 3 and body["wait_p50"] is not None and body["run_p95"] is not None
    missing = api.get("/api/v1/queues/nope")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"


def test_latency_is_zero_when_nothing_waits(engine, api):
    body = api.get("/api/v1/queues/default").json()
    assert body["latency"] == 0 and body["oldest_waiting_at"] is None and body["wait_p50"] is None


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/?#%\x00"),
               min_size=1, max_size=40))
def test_any_queue_name_in_the_path_is_a_queue_or_a_404(engine, api, name):
    response = api.get(f"/api/v1/queues/{name}")
    assert response.status_code in (200, 404), (name, response.status_code)
    if response.status_code == 200:
        assert response.json()["name"] == name


def test_the_prometheus_gauge(engine, client):
    key = ApiToken.issue(User.objects.create_user("prometheus"), scopes=("metrics",))[1]
    waiting_for()
    text = client.get("/metrics", headers={"Authorization": f"Bearer {key}"}).content.decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {s.labels["queue"]: s.value for s in families["queueadmin_queue_latency_seconds"].samples}
    assert 1.0 <= samples["default"] < 60


def test_queue_status_text_and_json(engine):
    waiting_for()
    out = io.StringIO()
    call_command("queue_status", stdout=out)
    line = next(x for x in out.getvalue().splitlines() if x.strip().startswith("latency:"))
    assert float(line.split()[1].rstrip("s")) >= 1.0 and "oldest waiting item" in line
    out = io.StringIO()
    call_command("queue_status", json=True, stdout=out)
    (default,) = [q for q in json.loads(out.getvalue())["queues"] if q["queue"] == "default"]
    assert 1.0 <= default["latency_seconds"] < 60 and "wait_p95_seconds" in default


def test_the_api_gives_a_queues_history_as_the_charts_draw_it(engine, api):
    services.submit("default", "echo", ["x", "y", "z"])
    burst(engine, ["default"])
    body = api.get("/api/v1/queues/default/history?range=15m").json()
    assert body["range"] == "15m" and body["step_seconds"] == 60 and len(body["points"]) == 15
    last = body["points"][-1]
    assert last["done"] == 3 and last["run_p50"] is not None and last["at"] <= time.time()
    assert len(api.get("/api/v1/queues/default/history?range=14d").json()["points"]) == 168
    bad = api.get("/api/v1/queues/default/history?range=2y")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid"
    assert api.get("/api/v1/queues/nope/history").status_code == 404


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(max_size=12))
def test_any_history_range_is_points_or_a_400(engine, api, rng):
    response = api.get("/api/v1/queues/default/history?" + urlencode({"range": rng}))
    assert response.status_code in (200, 400), (rng, response.status_code)
