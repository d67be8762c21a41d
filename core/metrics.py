"""/metrics for Prometheus, through prometheus_client.

Workers on any machine add their item counts and histogram buckets to Redis
(core/engine/stats.py); this web process reads them at scrape time with a
custom Collector, so every process serving /metrics shows the same,
cluster-wide figures and no per-process state needs merging.

* counters: queueadmin_items_{done,failed,retried,dead_lettered}_total{queue}
* histograms: queueadmin_item_run_seconds{queue} (an item's run time),
  queueadmin_item_wait_seconds{queue} (enqueue, or retry time, to start)
* gauges: depth (and by priority), in flight, scheduled, dead letters,
  paused, live requests, oldest request's age, queue latency
  (queueadmin_queue_latency_seconds: the age of the oldest waiting item,
  what an autoscaler such as KEDA scales on), live workers (per queue and
  in all), queueadmin_redis_up

With Redis unreachable the scrape still answers, with queueadmin_redis_up 0.
Access: a token allowing the `metrics` scope, or QUEUEADMIN_METRICS_TOKEN.
"""
from __future__ import annotations

import logging
import time

import redis
from django.db import DatabaseError
from django.http import HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from queueadmin.core import auth, clients, conf
from queueadmin.core.engine.client.queue_client import QueueError
from queueadmin.core.engine.features import stats
from queueadmin.core.engine.store import packed
from queueadmin.core.queries.dead import counts_by_queue

log = logging.getLogger("queueadmin.metrics")

COUNTERS = {  # stats field -> (metric name without _total, help)
    "done": ("queueadmin_items_done", "Items that finished successfully."),
    "failed": ("queueadmin_items_failed", "Item attempts that raised (retried or dead-lettered)."),
    "retried": ("queueadmin_items_retried", "Item attempts that raised and were scheduled to run again."),
    "dead": ("queueadmin_items_dead_lettered", "Items that exhausted their attempts and became dead letters."),
}
HISTOGRAMS = {
    "run": ("queueadmin_item_run_seconds", "Time an item's processor ran."),
    "wait": ("queueadmin_item_wait_seconds", "Time from an item's enqueue (or retry) to the start of its run."),
}


def _gauge(name: str, help_text: str, labels=("queue",)) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, labels=list(labels))


class QueueCollector(Collector):
    """Reads Redis on every collect(): the engine's figures for every queue."""

    def describe(self):
        return []  # no collect() at registration time

    def collect(self):
        up = GaugeMetricFamily("queueadmin_redis_up", "1 if Redis answered this scrape, else 0.")
        try:
            families = self._families(time.time())
        except redis.RedisError as exc:
            log.warning("metrics without Redis: %s", exc)
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        return [up, *families]

    def _families(self, now: float) -> list:
        client = clients.engine()
        depth = _gauge("queueadmin_queue_depth", "Items waiting to start (not scheduled, not in flight).")
        by_priority = _gauge("queueadmin_queue_depth_by_priority", "Items waiting to start, by request priority.",
                             ("queue", "priority"))
        in_flight = _gauge("queueadmin_queue_in_flight", "Items taken by a worker and not yet acknowledged.")
        scheduled = _gauge("queueadmin_queue_scheduled", "Items of delayed requests waiting for their start time.")
        dead = _gauge("queueadmin_queue_dead_letters", "Dead letters still in Redis (of live and finished requests), "
                                                       "as the Dead letters page counts them.")
        paused = _gauge("queueadmin_queue_paused", "1 if the queue is paused.")
        requests = _gauge("queueadmin_queue_requests", "Live (unfinished) requests.")
        oldest = _gauge("queueadmin_queue_oldest_request_age_seconds", "Age of the oldest live request.")
        latency = _gauge("queueadmin_queue_latency_seconds",
                         "Queue latency: seconds the oldest waiting item (not started, not scheduled) has waited.")
        workers_q = _gauge("queueadmin_queue_workers", "Live workers serving the queue.")
        workers = _gauge("queueadmin_workers", "Registered workers: live, or dead (missed heartbeats).", ("state",))

        known, live = worker_queues(client, now)
        workers.add_metric(["live"], len(live))
        workers.add_metric(["dead"], len(known) - len(live))
        names, dead_letters = [], dead_counts()
        for name in client.queues():
            try:
                figures = client.queue_stats(name)
            except QueueError:  # listed, but its config is gone
                continue
            names.append(name)
            depth.add_metric([name], figures["depth"])
            for prio, n in figures["depth_by_priority"].items():
                by_priority.add_metric([name, str(prio)], n)
            in_flight.add_metric([name], figures["in_flight"])
            scheduled.add_metric([name], figures["scheduled"])
            dead.add_metric([name], dead_letters.get(name, figures["dead"]))
            paused.add_metric([name], int(figures["paused"]))
            requests.add_metric([name], figures["requests"])
            first = _oldest_created(client, name)
            oldest.add_metric([name], max(0.0, round(now - first / 1000, 3)) if first else 0)
            latency.add_metric([name], round(figures["latency"], 3))
            workers_q.add_metric([name], sum(1 for queues in live.values() if name in queues))
        return [depth, by_priority, in_flight, scheduled, dead, paused, requests, oldest, latency, workers_q, workers,
                *engine_families(client.redis, client.keys, names)]


def _oldest_created(client, queue: str) -> int | None:
    """When (ms) the oldest live request of a queue was made: the head of its
    index, or a one-item request waiting packed, which the index leaves out."""
    first = client.redis.zrange(client.keys.queue(queue).index, 0, 0, withscores=True)
    bands = packed.waiting_counts(client.redis, client.keys, queue)
    times = [int(first[0][1])] if first else []
    times += [t for t in [packed.oldest_waiting(client.redis, client.keys, queue, bands)] if t is not None]
    return min(times, default=None)


def engine_families(r, keys, queues: list[str]) -> list:
    """Counters and histograms that workers keep in Redis (core/engine/stats.py)."""
    counters = {f: CounterMetricFamily(name, text, labels=["queue"]) for f, (name, text) in COUNTERS.items()}
    hists = {h: HistogramMetricFamily(name, text, labels=["queue"]) for h, (name, text) in HISTOGRAMS.items()}
    for queue, figures in stats.read(r, keys, queues).items():
        for f, family in counters.items():
            family.add_metric([queue], figures.counters[f])
        for h, family in hists.items():
            hist = figures.histograms[h]
            family.add_metric([queue], buckets=hist.buckets, sum_value=hist.sum)
    return [*counters.values(), *hists.values()]


def worker_queues(client, now: float) -> tuple[list[str], dict[str, list[str]]]:
    """Registered worker ids, and the live ones with their queues. Live: a
    heartbeat (the score in `workers`) within DEAD_AFTER_SECONDS."""
    cutoff = (now - float(conf.get("DEAD_AFTER_SECONDS"))) * 1000
    entries = client.redis.zrange(client.keys.workers, 0, -1, withscores=True)
    pipe = client.redis.pipeline(transaction=False)
    for wid, _ in entries:
        pipe.hmget(client.keys.worker(wid), "queues", "dead")
    live = {}
    for (wid, beat), (queues, dead) in zip(entries, pipe.execute()):
        if beat >= cutoff and dead != "1":
            live[wid] = [q for q in (queues or "").split(",") if q]
    return [wid for wid, _ in entries], live


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(QueueCollector())


# -- the view -------------------------------------------------------------------


def _text(body: str, status: int) -> HttpResponse:
    return HttpResponse(body + "\n", status=status, content_type="text/plain; charset=utf-8")


@csrf_exempt
@never_cache
def metrics_view(request):
    if request.method not in ("GET", "HEAD"):
        response = _text(f"method {request.method} not allowed; use GET", 405)
        response["Allow"] = "GET, HEAD"
        return response
    if not auth.metrics_allowed(request):
        response = _text("missing or invalid token: send 'Authorization: Bearer <key>' with a token allowing "
                         "the metrics scope, or QUEUEADMIN_METRICS_TOKEN", 401)
        response["WWW-Authenticate"] = 'Bearer realm="queueadmin"'
        return response
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(REGISTRY), content_type=content_type)


def dead_counts() -> dict[str, int]:
    """Dead letters per queue as the Dead letters page counts them (finished
    requests' too: an alert on the gauge must not miss those). Without the
    database (which names the finished ones), {}: live requests' only."""
    try:
        return counts_by_queue()
    except DatabaseError as exc:
        log.warning("metrics: dead letters of finished requests not counted (database: %s)", exc)
        return {}
