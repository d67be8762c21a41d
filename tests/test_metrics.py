"""/metrics: token-protected Prometheus text with per-queue gauges from
Redis and request counts from the database; still answers with Redis down."""
from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from core import embedded, services
from core.engine.registry import Registry
from core.metrics import CONTENT_TYPE, Family
from core.models import ApiToken, RequestRecord

pytestmark = [pytest.mark.django_db, pytest.mark.urls("core.api_urls")]

SAMPLE = re.compile(r'^([a-z_][a-z0-9_]*)(\{[a-z_]+="(?:[^"\\]|\\.)*"(?:,[a-z_]+="(?:[^"\\]|\\.)*")*\})? (-?[0-9.e+]+)$')


@pytest.fixture
def engine(redis_url):
    services.sync_queues()
    return services.engine()


@pytest.fixture
def key(db):
    return ApiToken.issue(User.objects.create_user("prometheus"))[1]


def scrape(client, key):
    response = client.get("/metrics", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200
    assert response["Content-Type"] == CONTENT_TYPE
    return response.content.decode()


def parse(text):
    """{(name, labels text): value}; checks every line is well-formed."""
    samples, declared = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            declared.add(line.split()[2])
            continue
        if line.startswith("# HELP "):
            continue
        m = SAMPLE.match(line)
        assert m, f"bad exposition line: {line!r}"
        assert m[1] in declared, f"{m[1]} has no TYPE"
        samples[(m[1], m[2] or "")] = float(m[3])
    return samples


def test_metrics_need_a_token(engine, client, key, settings):
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.post("/metrics", headers={"Authorization": f"Bearer {key}"}).status_code == 405
    scrape(client, key)
    settings.QUEUEADMIN_METRICS_TOKEN = "scrape-secret"
    scrape(client, "scrape-secret")
    assert client.get("/metrics", headers={"Authorization": "Bearer scrape-secretX"}).status_code == 401


def test_queue_gauges(engine, client, key, r):
    services.submit("default", "echo", ["a", "b", "c"], priority=80)
    services.submit("default", "echo", ["d"], priority=20)
    services.submit("default", "echo", ["e", "f"], delay=600)
    engine.set_paused("default", True)
    samples = parse(scrape(client, key))
    q = '{queue="default"}'
    assert samples[("queueadmin_redis_up", "")] == 1
    assert samples[("queueadmin_queue_depth", q)] == 4
    assert samples[("queueadmin_queue_depth_by_priority", '{queue="default",priority="80"}')] == 3
    assert samples[("queueadmin_queue_depth_by_priority", '{queue="default",priority="20"}')] == 1
    assert samples[("queueadmin_queue_scheduled", q)] == 2
    assert samples[("queueadmin_queue_in_flight", q)] == 0
    assert samples[("queueadmin_queue_dead_letters", q)] == 0
    assert samples[("queueadmin_queue_paused", q)] == 1
    assert samples[("queueadmin_queue_requests", q)] == 3
    assert 0 <= samples[("queueadmin_queue_oldest_request_age_seconds", q)] < 60
    assert samples[("queueadmin_requests", '{queue="default",state="queued"}')] == 2
    assert samples[("queueadmin_requests", '{queue="default",state="scheduled"}')] == 1


def test_workers_and_throughput(engine, client, key, settings, r):
    registry = Registry(r, engine.keys)
    registry.register("w1", "w1", "host", 1, ["default", "other"])
    registry.register("w2", "w2", "host", 2, ["other"])
    registry.register("w3", "w3", "host", 3, ["default"])
    old = int((time.time() - settings.QUEUEADMIN["DEAD_AFTER_SECONDS"] - 5) * 1000)
    r.zadd(engine.keys.workers, {"w3": old})  # missed its heartbeats
    minute = int(time.time() // 60)
    r.hset(engine.keys.throughput("default", minute - 1), mapping={"done": 7, "failed": 2})
    r.hset(engine.keys.throughput("default", minute - 5), mapping={"done": 3})
    r.hset(engine.keys.throughput("default", minute), mapping={"done": 100})  # the minute still running
    samples = parse(scrape(client, key))
    assert samples[("queueadmin_workers", '{state="live"}')] == 2
    assert samples[("queueadmin_workers", '{state="dead"}')] == 1
    assert samples[("queueadmin_queue_workers", '{queue="default"}')] == 1
    done, failed = '{queue="default",outcome="done"}', '{queue="default",outcome="failed"}'
    assert samples[("queueadmin_queue_items_last_minute", done)] == 7
    assert samples[("queueadmin_queue_items_last_minute", failed)] == 2
    assert samples[("queueadmin_queue_items_last_15_minutes", done)] == 10


def test_latency_from_finished_requests(engine, client, key):
    now = timezone.now()
    for i, (wait, run) in enumerate([(1, 10), (3, 20)]):
        RequestRecord.objects.create(id=f"r{i}", queue="default", processor="echo", state="completed", priority=50,
                                     concurrency=1, created_at=now - timedelta(seconds=run),
                                     started_at=now - timedelta(seconds=run - wait), finished_at=now)
    samples = parse(scrape(client, key))
    assert samples[("queueadmin_request_wait_seconds_avg", '{queue="default"}')] == 2
    assert samples[("queueadmin_request_duration_seconds_avg", '{queue="default"}')] == 15


def test_redis_down_still_answers(engine, client, key, settings):
    services.submit("default", "echo", ["a"])
    settings.REDIS_URL = f"redis://127.0.0.1:{embedded.free_port()}/0"
    services.reset()
    samples = parse(scrape(client, key))
    assert samples[("queueadmin_redis_up", "")] == 0
    assert samples[("queueadmin_requests", '{queue="default",state="queued"}')] == 1
    assert not any(name.startswith("queueadmin_queue_") for name, _ in samples)


def test_label_values_are_escaped():
    family = Family("x_total", "gauge", "test")
    family.add(1.5, queue='a"b\\c\nd')
    assert family.render().splitlines()[-1] == 'x_total{queue="a\\"b\\\\c\\nd"} 1.5'
