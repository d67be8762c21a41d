"""A queue's page: its live figures (as the overview reads them), its
latency now, wait and run percentiles over the last hour from the
metrics history, and its groups (tenants: features/groups.py), if any."""
from __future__ import annotations

from queueadmin.core.engine.features import groups, history

from . import charts
from .base import client, keys, queue_names, rdb
from .overview import overview


def queue_page(name: str) -> dict | None:
    """None when no such queue is defined."""
    if name not in queue_names():
        return None
    data = overview()
    q = next((x for x in data["queues"] if x["name"] == name), None)
    if q is None:
        return None
    start, end, _ = charts.window(charts.RANGES["1h"])
    hour = history.Point()
    for p in history.read(rdb(), keys(), [history.queue_series(name)], start, end, 1):
        hour.add(p)
    return {"q": q, "hour": hour, "wait_p50": hour.wait_p(0.5), "wait_p95": hour.wait_p(0.95),
            "run_p50": hour.run_p(0.5), "run_p95": hour.run_p(0.95), "groups": groups.stats(client(), name),
            "groups_capped_at": groups.WAITING_READ}


def latency_now(queue: str | None) -> float:
    """The oldest waiting item's age in `queue` (None: in any queue), seconds."""
    data = overview()
    return max((q["latency"] for q in data["queues"] if queue in (None, q["name"])), default=0.0)
