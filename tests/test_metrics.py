"""/metrics: prometheus_client exposition with proper types. Counters and
histograms come from Redis (workers write them through core.engine.stats),
gauges from the live queue; access by a `metrics` token or the shared key."""
from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import User
from django.urls import path
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from queueadmin.core import conf
from queueadmin.core import embedded, metrics, services
from queueadmin.core.engine.features import stats
from queueadmin.core.engine.runtime.registry import Registry
from queueadmin.core.models import ApiToken
from tests.engine_helpers import wait_for

urlpatterns = [path("metrics", metrics.metrics_view)]  # the view alone (the site mounts it at /metrics too)
pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

COUNTER_NAMES = ("queueadmin_items_done", "queueadmin_items_failed", "queueadmin_items_retried",
                 "queueadmin_items_dead_lettered")
HISTOGRAM_NAMES = ("queueadmin_item_run_seconds", "queueadmin_item_wait_seconds")
GAUGE_NAMES = ("queueadmin_redis_up", "queueadmin_queue_depth", "queueadmin_queue_depth_by_priority",
               "queueadmin_queue_in_flight", "queueadmin_queue_scheduled", "queueadmin_queue_dead_letters",
               "queueadmin_queue_paused", "queueadmin_queue_requests", "queueadmin_queue_oldest_request_age_seconds",
               "queueadmin_queue_workers", "queueadmin_workers")


@pytest.fixture
def key(db):
    return ApiToken.issue(User.objects.create_user("prometheus"), scopes=("metrics",))[1]


def scrape_text(client, key, **headers) -> str:
    response = client.get("/metrics", headers={"Authorization": f"Bearer {key}", **headers})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return response.content.decode()


def scrape(client, key) -> dict:
    """{family name: family}, parsed by prometheus_client's own parser."""
    return {f.name: f for f in text_string_to_metric_families(scrape_text(client, key))}


def value(families, name, sample=None, **labels):
    """The value of one sample (`sample` defaults to the family name)."""
    found = [s.value for s in families[name].samples
             if s.name == (sample or name) and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{sample or name} {labels}: {found}"
    return found[0]


def series(families) -> dict:
    """Every counter and histogram sample: {(sample name, labels): value}."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in families.values() if f.type in ("counter", "histogram") for s in f.samples}


def test_metrics_need_a_metrics_token(engine, client, key, settings):
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    staffless = ApiToken.issue(User.objects.create_user("api-user"), scopes=("read",))[1]
    assert client.get("/metrics", headers={"Authorization": f"Bearer {staffless}"}).status_code == 401
    assert client.post("/metrics", headers={"Authorization": f"Bearer {key}"}).status_code == 405
    scrape_text(client, key)
    settings.QUEUEADMIN_METRICS_TOKEN = "scrape-secret"
    scrape_text(client, "scrape-secret")
    assert client.get("/metrics", headers={"Authorization": "Bearer scrape-secretX"}).status_code == 401


def test_every_family_has_its_proper_type(engine, client, key):
    families = scrape(client, key)
    for name in COUNTER_NAMES:
        assert families[name].type == "counter", name
        assert {s.name for s in families[name].samples} == {name + "_total"}
    for name in HISTOGRAM_NAMES:
        assert families[name].type == "histogram", name
        names = {s.name for s in families[name].samples}
        assert names == {name + "_bucket", name + "_sum", name + "_count"}
        buckets = [s.labels["le"] for s in families[name].samples if s.name.endswith("_bucket")]
        assert buckets[-1] == "+Inf" and len(buckets) == len(set(buckets))
    for name in GAUGE_NAMES:
        assert families[name].type == "gauge", name
    assert value(families, "queueadmin_redis_up") == 1


def test_openmetrics_when_asked(engine, client, key):
    response = client.get("/metrics", headers={"Authorization": f"Bearer {key}",
                                               "Accept": "application/openmetrics-text; version=1.0.0"})
    assert response["Content-Type"].startswith("application/openmetrics-text")
    families = {f.name: f for f in parse_openmetrics(response.content.decode())}
    assert families["queueadmin_items_done"].type == "counter"
    assert families["queueadmin_item_run_seconds"].type == "histogram"


def test_queue_gauges(engine, client, key, r):
    services.submit("default", "echo", ["a", "b", "c"], priority=80)
    services.submit("default", "echo", ["d"], priority=20)
    services.submit("default", "echo", ["e", "f"], delay=600)
    engine.set_paused("default", True)
    f = scrape(client, key)
    q = {"queue": "default"}
    assert value(f, "queueadmin_queue_depth", **q) == 4
    assert value(f, "queueadmin_queue_depth_by_priority", priority="80", **q) == 3
    assert value(f, "queueadmin_queue_depth_by_priority", priority="20", **q) == 1
    assert value(f, "queueadmin_queue_scheduled", **q) == 2
    assert value(f, "queueadmin_queue_in_flight", **q) == 0
    assert value(f, "queueadmin_queue_dead_letters", **q) == 0
    assert value(f, "queueadmin_queue_paused", **q) == 1
    assert value(f, "queueadmin_queue_requests", **q) == 3
    assert 0 <= value(f, "queueadmin_queue_oldest_request_age_seconds", **q) < 60


def test_the_oldest_request_counts_one_item_requests_waiting_packed(engine, client, key, r):
    """A one-item request waiting packed has no index entry (engine/store/packed.py):
    the gauge of the oldest live request finds it at the head of its band."""
    old = engine.submit("default", "echo", ["x"], priority=30, dedup=False)
    engine.submit("default", "echo", ["a", "b"], dedup=False)
    assert r.zscore(engine.keys.queue("default").index, old.id) is None
    r.hset(engine.keys.request(old.id).meta, "created_at", int((time.time() - 3600) * 1000))
    f = scrape(client, key)
    q = {"queue": "default"}
    assert 3590 <= value(f, "queueadmin_queue_oldest_request_age_seconds", **q) < 3700
    assert value(f, "queueadmin_queue_requests", **q) == 2
    assert value(f, "queueadmin_queue_depth_by_priority", priority="30", **q) == 1


def test_live_and_dead_workers(engine, client, key, settings, r):
    registry = Registry(r, engine.keys)
    registry.register("w1", "w1", "host", 1, ["default", "other"])
    registry.register("w2", "w2", "host", 2, ["other"])
    registry.register("w3", "w3", "host", 3, ["default"])
    old = int((time.time() - conf.get("DEAD_AFTER_SECONDS") - 5) * 1000)
    r.zadd(engine.keys.workers, {"w3": old})  # missed its heartbeats
    f = scrape(client, key)
    assert value(f, "queueadmin_workers", state="live") == 2
    assert value(f, "queueadmin_workers", state="dead") == 1
    assert value(f, "queueadmin_queue_workers", queue="default") == 1


def test_counters_and_histograms_from_what_workers_record(engine, client, key, r):
    """Two workers (say, on two machines) add to the same figures."""
    for batch in ({"done": 3, "run_times": [0.002, 0.004, 0.6], "waits": [0.0005, 2.0]},
                  {"done": 1, "retried": 2, "dead": 1, "run_times": [0.005, 7200.0], "waits": [0.05]}):
        pipe = r.pipeline(transaction=False)
        stats.record(pipe, engine.keys, "default", **batch)
        pipe.execute()
    f = scrape(client, key)
    q = {"queue": "default"}
    assert value(f, "queueadmin_items_done", "queueadmin_items_done_total", **q) == 4
    assert value(f, "queueadmin_items_retried", "queueadmin_items_retried_total", **q) == 2
    assert value(f, "queueadmin_items_dead_lettered", "queueadmin_items_dead_lettered_total", **q) == 1
    assert value(f, "queueadmin_items_failed", "queueadmin_items_failed_total", **q) == 3  # retried + dead
    run = "queueadmin_item_run_seconds"
    assert value(f, run, run + "_bucket", le="0.0025", **q) == 1
    assert value(f, run, run + "_bucket", le="0.005", **q) == 3  # le is inclusive: 0.005 counts here
    assert value(f, run, run + "_bucket", le="1.0", **q) == 4
    assert value(f, run, run + "_bucket", le="3600.0", **q) == 4
    assert value(f, run, run + "_bucket", le="+Inf", **q) == 5
    assert value(f, run, run + "_count", **q) == 5
    assert value(f, run, run + "_sum", **q) == pytest.approx(7200.611)
    wait = "queueadmin_item_wait_seconds"
    assert value(f, wait, wait + "_bucket", le="0.001", **q) == 1
    assert value(f, wait, wait + "_count", **q) == 3
    assert value(f, wait, wait + "_sum", **q) == pytest.approx(2.0505)


def test_stats_round_trip_and_entry_times(r):
    from queueadmin.core.engine.store.keys import Keys

    keys = Keys("qa")
    pipe = r.pipeline(transaction=False)
    stats.record(pipe, keys, "q", done=2, failed=5, run_times=[-1.0, 1e9])  # clock skew: 0, huge: +Inf
    pipe.execute()
    figures = stats.read(r, keys, ["q", "never-used"])
    assert figures["q"].counters == {"done": 2, "failed": 5, "retried": 0, "dead": 0}
    hist = figures["q"].histograms["run"]
    assert hist.buckets[0] == ("0.001", 1) and hist.buckets[-1] == ("+Inf", 2) and hist.count == 2
    assert figures["never-used"].counters == dict.fromkeys(stats.COUNTERS, 0)
    assert figures["never-used"].histograms["wait"].count == 0
    assert stats.enqueued_at("1700000000123-4") == 1700000000.123


def test_redis_down_still_answers(engine, client, key, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{embedded.free_port()}/0"
    services.reset()
    f = scrape(client, key)
    assert value(f, "queueadmin_redis_up") == 0
    assert not any(name.startswith(("queueadmin_queue_", "queueadmin_items_")) for name in f)


@pytest.mark.slow
def test_counters_only_go_up_as_real_workers_run_items(engine, qc, client, key, workers):
    """Scrape, run more items with real worker processes, scrape again."""
    fast = {"queue": "fast"}
    workers.start("default,fast", processes=2)
    first = services.submit("default", "echo", [str(i) for i in range(30)])
    failing = services.submit("fast", "fail", ["x", "y"])  # 3 attempts each: 2 retries, then dead
    wait_for(lambda: [engine.status(s.id)["state"] for s in (first, failing)] == ["completed", "failed"], 60,
             message=workers.logs())
    before = scrape(client, key)
    assert value(before, "queueadmin_items_done", "queueadmin_items_done_total", queue="default") == 30
    assert value(before, "queueadmin_items_retried", "queueadmin_items_retried_total", **fast) == 4
    assert value(before, "queueadmin_items_dead_lettered", "queueadmin_items_dead_lettered_total", **fast) == 2
    assert value(before, "queueadmin_item_run_seconds", "queueadmin_item_run_seconds_count", queue="default") == 30
    assert value(before, "queueadmin_item_wait_seconds", "queueadmin_item_wait_seconds_count", queue="default") == 30

    second = services.submit("default", "echo", [str(i) for i in range(20)])
    wait_for(lambda: engine.status(second.id)["state"] == "completed", 60, message=workers.logs())
    after = scrape(client, key)
    old, new = series(before), series(after)
    assert set(old) <= set(new)
    assert all(new[k] >= v for k, v in old.items()), [k for k, v in old.items() if new[k] < v]
    assert value(after, "queueadmin_items_done", "queueadmin_items_done_total", queue="default") == 50
