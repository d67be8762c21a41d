"""The queues: figures (latency and last hour's percentiles among them) and
configuration, by name, a page at a time, or one queue by name."""
from __future__ import annotations

from dataclasses import asdict
from typing import Optional

from ninja import Query, Router

from queueadmin.core import clients, operations
from queueadmin.core.engine.client.queue_client import QueueError
from queueadmin.core.engine.features import history
from queueadmin.core.queries import charts
from ..models import Queue
from . import cursor as cursors
from .errors import ApiError
from .requests import ERRORS
from .schemas import HistoryOut, QueueOut, QueuePage
from .security import BearerToken


def queue_list(request, limit: int = Query(100, ge=1, le=500), cursor: Optional[str] = None):
    client = clients.engine()
    operations.push_queues(Queue.objects.values_list("name", flat=True))
    names = sorted(client.queues())
    if cursor:
        after = cursors.decode(cursor, _name)
        names = [n for n in names if n > after]
    out = []
    for name in names:
        if len(out) == limit:
            return {"queues": out, "next_cursor": cursors.encode(out[-1]["name"])}
        try:
            out.append(queue_figures(client, name))
        except QueueError:
            continue  # listed but its config is gone: not a usable queue
    return {"queues": out, "next_cursor": None}


def queue_figures(client, name: str) -> dict:
    """A queue's figures and configuration (QueueError: its config is gone)."""
    stats, config = client.queue_stats(name), client.queue_config(name)
    hour = history.recent(client.redis, client.keys, [history.queue_series(name)])
    return {**stats, "name": name, "depth_by_priority": {str(k): v for k, v in stats["depth_by_priority"].items()},
            "wait_p50": hour.wait_p(0.5), "wait_p95": hour.wait_p(0.95), "run_p50": hour.run_p(0.5),
            "run_p95": hour.run_p(0.95), "done_last_hour": hour.done, "failed_last_hour": hour.failed,
            "config": asdict(config)}


def queue_detail(request, name: str):
    client = clients.engine()
    operations.push_queues(Queue.objects.values_list("name", flat=True))
    if name not in client.queues():
        raise ApiError(404, "not_found", f"no queue named {name!r}")
    try:
        return queue_figures(client, name)
    except QueueError:
        raise ApiError(404, "not_found", f"no queue named {name!r}") from None


def _name(value) -> str:
    if not isinstance(value, str):
        raise TypeError("a queue name")
    return value


def queue_history(request, name: str, range: str = Query("1h", description="15m, 1h, 6h, 24h, 7d or 14d")):
    """The metrics history of one queue, as the dashboard charts it."""
    client = clients.engine()
    if name not in client.queues():
        raise ApiError(404, "not_found", f"no queue named {name!r}")
    try:
        rng = charts.parse_range(range)
    except charts.BadRange as exc:
        raise ApiError(400, "invalid", str(exc)) from None
    start, end, n = charts.window(rng)
    points = history.read(client.redis, client.keys, [history.queue_series(name)], start, end, rng.step)
    step_s = rng.step * 60
    return {"name": name, "range": rng.key, "step_seconds": step_s, "points": [
        {"at": (start + i * rng.step) * 60, "done": p.done, "failed": p.failed, "wait_p50": p.wait_p(0.5),
         "wait_p95": p.wait_p(0.95), "wait_max": p.max_wait_ms / 1000 if p.max_wait_ms else None,
         "run_p50": p.run_p(0.5), "run_p95": p.run_p(0.95), "in_flight": round(p.busy(step_s), 3)}
        for i, p in enumerate(points)]}


def mount(router: Router, *, legacy: bool = False) -> None:
    router.get("/queues", auth=BearerToken("read"), url_name=("api-legacy-" if legacy else "api-v1-") + "queues",
               response={200: QueuePage, **ERRORS}, summary="List queues with their figures and configuration",
               description="Scope: read. Paginated by name: pass next_cursor as ?cursor= for the next page.",
               include_in_schema=not legacy, tags=["queues"])(queue_list)
    if not legacy:
        router.get("/queues/{name}", auth=BearerToken("read"), url_name="api-v1-queue", response={200: QueueOut, **ERRORS},
                   summary="One queue's figures (latency, last hour's wait and run percentiles) and configuration",
                   description="Scope: read. latency is the age in seconds of the oldest waiting item, what an "
                               "autoscaler reads; 404 for an unknown queue.", tags=["queues"])(queue_detail)
        router.get("/queues/{name}/history", auth=BearerToken("read"), url_name="api-v1-queue-history",
                   response={200: HistoryOut, **ERRORS}, summary="One queue's metrics history over a range",
                   description="Scope: read. Points of the dashboard's charts: done and failed, wait and run "
                               "percentiles, in flight; 400 for an unknown range, 404 for an unknown queue.",
                   tags=["queues"])(queue_history)
