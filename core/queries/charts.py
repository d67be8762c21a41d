"""The history charts of the overview (every queue) and of a queue's page:
done and failed per minute, queue latency (how long the oldest item waited,
wait p50/p95), run time p50/p95, and items in flight against the workers'
capacity, over a range from 15 minutes to 14 days, read from the metrics
history (core/engine/features/history.py) in one round trip.

Ranges up to a day read per-minute points (a day is 24 hashes per queue),
longer ones the per-hour points (a day is one hash): 14 days of every queue
cost 15 HGETALLs per queue whatever the traffic.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from queueadmin.core.engine.features import history

from .base import keys, queue_names, rdb
from .workers import workers


@dataclass(frozen=True)
class Range:
    key: str
    label: str
    minutes: int  # the span shown
    step: int  # minutes per point (whole hours past a day: per-hour points)


RANGES = {r.key: r for r in (
    Range("15m", "15 min", 15, 1), Range("1h", "1 hour", 60, 1), Range("6h", "6 hours", 360, 5),
    Range("24h", "24 hours", 1440, 15), Range("7d", "7 days", 10080, 60), Range("14d", "14 days", 20160, 120),
)}
DEFAULT_RANGE = "1h"


class BadRange(ValueError):
    """A range that is not one of RANGES (the view answers 400)."""


def parse_range(value: str | None) -> Range:
    if value in (None, ""):
        return RANGES[DEFAULT_RANGE]
    found = RANGES.get(value)
    if found is None:
        raise BadRange(f"range must be one of {', '.join(RANGES)}")
    return found


def window(rng: Range, now: float | None = None) -> tuple[int, int, int]:
    """(first minute, last minute, points): whole steps ending with the one
    that holds now, so a point's span does not move as the chart refreshes."""
    end_step = int((time.time() if now is None else now) // 60) // rng.step
    n = rng.minutes // rng.step
    return (end_step - n + 1) * rng.step, end_step * rng.step + rng.step - 1, n


def history_charts(queue: str | None, rng: Range, latency_now: float) -> dict:
    """The four charts' series for one queue (None: every queue together).
    `latency_now` (seconds) is the live right edge of the latency chart."""
    names = [queue] if queue else queue_names()
    start, end, n = window(rng)
    series = [history.queue_series(queue)] if queue else [history.ALL]
    points = history.read(rdb(), keys(), series, start, end, rng.step)
    step_s = rng.step * 60
    times = [(start + i * rng.step) * 60 for i in range(n)]
    # each point's span in minutes; the last one, still filling, only as far as now (its rates are not diluted)
    spans = [float(rng.step)] * (n - 1) + [max(1.0, min(rng.step, time.time() / 60 - start - (n - 1) * rng.step))]
    max_wait = [p.max_wait_ms / 1000 if p.max_wait_ms else None for p in points]
    max_wait[-1] = max(max_wait[-1] or 0.0, latency_now)  # live: the oldest waiting item now
    return {
        "range": rng, "ranges": list(RANGES.values()), "queue": queue, "times": times, "step_s": step_s,
        "throughput": [("done", "done", [p.done / m for p, m in zip(points, spans)]),
                       ("failed", "failed", [p.failed / m for p, m in zip(points, spans)])],
        "latency": [("oldest", "oldest waiting", max_wait),
                    ("p95", "wait p95", [p.wait_p(0.95) for p in points]),
                    ("p50", "wait p50", [p.wait_p(0.5) for p in points])],
        "run": [("p95", "run p95", [p.run_p(0.95) for p in points]),
                ("p50", "run p50", [p.run_p(0.5) for p in points])],
        "busy": [("capacity", "capacity", [float(capacity(names))] * n),
                 ("busy", "in flight (average)", [p.busy(m * 60) for p, m in zip(points, spans)])],
        "latency_now": latency_now,
        "totals": {"done": sum(p.done for p in points), "failed": sum(p.failed for p in points)},
    }


def capacity(queues: list[str]) -> int:
    """Thread slots of the live workers serving any of `queues` (async tasks
    aside: their limit is a ceiling, not a pool of workers)."""
    wanted = set(queues)
    return sum((w["threads"] or {}).get("total", 0) for w in workers()
               if w["live"] and wanted.intersection(w["queues"]))
