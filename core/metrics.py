"""Prometheus metrics in the text exposition format (0.0.4), written by hand.

Redis gives the live picture (per queue: depth, depth by priority, in
flight, scheduled, dead letters, paused, live workers, recent throughput,
age of the oldest live request); the database gives request history (counts
by state, wait and run time of recently finished requests). When Redis
cannot be reached, `queueadmin_redis_up` is 0 and only the history is shown:
the scrape itself still succeeds, as exporters usually do.
"""
from __future__ import annotations

import hmac
import logging
import time
from datetime import timedelta

import redis
from django.conf import settings
from django.db.models import Count
from django.http import HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from . import auth
from .engine.client import QueueError

log = logging.getLogger("queueadmin.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
THROUGHPUT_MINUTES = 15
LATENCY_WINDOW = timedelta(hours=1)
LATENCY_SAMPLE = 10_000  # finished requests read at most, newest first


class Family:
    """One metric: name, type, help and its samples."""

    def __init__(self, name: str, kind: str, help_text: str):
        self.name, self.kind, self.help = name, kind, help_text
        self.samples: list[tuple[dict, float]] = []

    def add(self, value: float, **labels) -> None:
        self.samples.append((labels, value))

    def render(self) -> str:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for labels, value in self.samples:
            text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
            lines.append(f"{self.name}{{{text}}} {_number(value)}" if text else f"{self.name} {_number(value)}")
        return "\n".join(lines)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def gauge(name: str, help_text: str) -> Family:
    return Family(name, "gauge", help_text)


def render(now: float | None = None) -> str:
    now = time.time() if now is None else now
    up = gauge("queueadmin_redis_up", "1 if the queue backend (Redis) answered this scrape, else 0.")
    families = [up]
    try:
        families += queue_families(now)
        up.add(1)
    except redis.RedisError as exc:
        log.warning("metrics without Redis: %s", exc)
        families = [up]
        up.add(0)
    families += history_families()
    return "\n".join(f.render() for f in families) + "\n"


def queue_families(now: float) -> list[Family]:
    from .services import engine

    client = engine()
    depth = gauge("queueadmin_queue_depth", "Items waiting to start (not scheduled, not in flight).")
    by_priority = gauge("queueadmin_queue_depth_by_priority", "Items waiting to start, by request priority.")
    in_flight = gauge("queueadmin_queue_in_flight", "Items taken by a worker and not yet acknowledged.")
    scheduled = gauge("queueadmin_queue_scheduled", "Items of delayed requests waiting for their start time.")
    dead = gauge("queueadmin_queue_dead_letters", "Items that exhausted their attempts, of live requests.")
    paused = gauge("queueadmin_queue_paused", "1 if the queue is paused.")
    requests = gauge("queueadmin_queue_requests", "Live (unfinished) requests in the queue.")
    oldest = gauge("queueadmin_queue_oldest_request_age_seconds", "Age of the queue's oldest live request.")
    workers_q = gauge("queueadmin_queue_workers", "Live workers serving the queue.")
    last_minute = gauge("queueadmin_queue_items_last_minute",
                        "Items finished in the last complete minute, by outcome (done, failed).")
    recent = gauge(f"queueadmin_queue_items_last_{THROUGHPUT_MINUTES}_minutes",
                   f"Items finished in the last {THROUGHPUT_MINUTES} complete minutes, by outcome.")
    workers = gauge("queueadmin_workers", "Registered workers, live or dead (missed heartbeats).")

    known, live = worker_queues(client, now)
    workers.add(len(live), state="live")
    workers.add(len(known) - len(live), state="dead")

    minute = int(now // 60)
    for name in client.queues():
        try:
            stats = client.queue_stats(name)
        except QueueError:  # listed, but its config is gone
            continue
        depth.add(stats["depth"], queue=name)
        for prio, n in stats["depth_by_priority"].items():
            by_priority.add(n, queue=name, priority=prio)
        in_flight.add(stats["in_flight"], queue=name)
        scheduled.add(stats["scheduled"], queue=name)
        dead.add(stats["dead"], queue=name)
        paused.add(int(stats["paused"]), queue=name)
        requests.add(stats["requests"], queue=name)
        first = client.redis.zrange(client.keys.queue(name).index, 0, 0, withscores=True)
        oldest.add(max(0.0, round(now - first[0][1] / 1000, 3)) if first else 0, queue=name)
        workers_q.add(sum(1 for queues in live.values() if name in queues), queue=name)

        pipe = client.redis.pipeline(transaction=False)
        for m in range(minute - THROUGHPUT_MINUTES, minute):
            pipe.hmget(client.keys.throughput(name, m), "done", "failed")
        counts = pipe.execute()
        for i, outcome in enumerate(("done", "failed")):
            last_minute.add(int(counts[-1][i] or 0), queue=name, outcome=outcome)
            recent.add(sum(int(c[i] or 0) for c in counts), queue=name, outcome=outcome)
    return [depth, by_priority, in_flight, scheduled, dead, paused, requests, oldest, workers_q, last_minute,
            recent, workers]


def worker_queues(client, now: float) -> tuple[list[str], dict[str, list[str]]]:
    """Registered worker ids, and the live ones with their queues. Live: a
    heartbeat (the score in `workers`) within DEAD_AFTER_SECONDS."""
    cutoff = (now - float(settings.QUEUEADMIN.get("DEAD_AFTER_SECONDS", 10.0))) * 1000
    entries = client.redis.zrange(client.keys.workers, 0, -1, withscores=True)
    pipe = client.redis.pipeline(transaction=False)
    for wid, _ in entries:
        pipe.hmget(client.keys.worker(wid), "queues", "dead")
    live = {}
    for (wid, beat), (queues, dead) in zip(entries, pipe.execute()):
        if beat >= cutoff and dead != "1":
            live[wid] = [q for q in (queues or "").split(",") if q]
    return [wid for wid, _ in entries], live


def history_families() -> list[Family]:
    from .models import RequestRecord

    states = gauge("queueadmin_requests", "Requests in the history, by queue and state.")
    for row in RequestRecord.objects.order_by().values("queue", "state").annotate(n=Count("id")):
        states.add(row["n"], queue=row["queue"], state=row["state"])

    wait = gauge("queueadmin_request_wait_seconds_avg",
                 "Mean time from submission (or start time) to the first item taken, of requests finished "
                 "in the last hour.")
    run = gauge("queueadmin_request_duration_seconds_avg",
                "Mean time from submission to completion of requests finished in the last hour.")
    since = timezone.now() - LATENCY_WINDOW
    rows = (RequestRecord.objects.filter(finished_at__gte=since).order_by("-finished_at")
            .values_list("queue", "created_at", "not_before", "started_at", "finished_at")[:LATENCY_SAMPLE])
    waits: dict[str, list[float]] = {}
    runs: dict[str, list[float]] = {}
    for queue, created, not_before, started, finished in rows:
        runs.setdefault(queue, []).append((finished - created).total_seconds())
        if started:
            waits.setdefault(queue, []).append(max(0.0, (started - (not_before or created)).total_seconds()))
    for queue, values in sorted(waits.items()):
        wait.add(round(sum(values) / len(values), 3), queue=queue)
    for queue, values in sorted(runs.items()):
        run.add(round(sum(values) / len(values), 3), queue=queue)
    return [states, wait, run]


# -- the view -------------------------------------------------------------------


def _allowed(request) -> bool:
    """settings.QUEUEADMIN_METRICS_TOKEN (for a scraper), or any API token."""
    shared = getattr(settings, "QUEUEADMIN_METRICS_TOKEN", None)
    key = auth.bearer_key(request)
    if shared and key and hmac.compare_digest(key.encode(), str(shared).encode()):
        return True
    return auth.authenticate(request) is not None


def _text(body: str, status: int) -> HttpResponse:
    return HttpResponse(body + "\n", status=status, content_type="text/plain; charset=utf-8")


@csrf_exempt
@never_cache
def metrics_view(request):
    if request.method not in ("GET", "HEAD"):
        response = _text(f"method {request.method} not allowed; use GET", 405)
        response["Allow"] = "GET, HEAD"
        return response
    if not _allowed(request):
        response = _text("missing or invalid token (send 'Authorization: Bearer <key>')", 401)
        response["WWW-Authenticate"] = 'Bearer realm="queueadmin"'
        return response
    return HttpResponse(render(), content_type=CONTENT_TYPE)
