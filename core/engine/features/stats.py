"""Item counters and histograms per queue, kept in Redis so that workers on
any number of machines add to the same figures and any web process can
expose them (core/metrics.py reads them for Prometheus).

One hash per queue (`keys.stats(queue)`, no expiry): counters only go up.

    done, failed, retried, dead      items; failed = attempts that raised
                                     (retried + dead-lettered)
    run:<le>, wait:<le>, ...:+Inf    histogram buckets, NOT cumulative: the
                                     observations in (previous bound, le]
    run:sum, wait:sum                seconds (HINCRBYFLOAT)

A worker calls `record_buckets` on the pipeline of a round trip it makes anyway, at
most once a second while busy and at once when it goes idle (claims.py,
FIGURES_EVERY); that adds only HINCRBY/HINCRBYFLOAT commands, one per field
that changed.
Waits are measured from the item's stream entry id (Redis' clock at enqueue)
to the worker's start time, so clock skew between machines shows in them
(a negative wait counts as 0).
"""
from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from queueadmin.core.engine.store.keys import Keys

COUNTERS = ("done", "failed", "retried", "dead")
# seconds: an item's run time, and its wait from enqueue (or retry) to start
RUN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
               900.0, 3600.0)
WAIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
                900.0, 3600.0, 14400.0, 86400.0)
HISTOGRAMS = {"run": RUN_BUCKETS, "wait": WAIT_BUCKETS}
INF = "+Inf"


def bound(value: float) -> str:
    """A bucket bound as text, the way Prometheus labels it (le="0.005")."""
    return repr(float(value))


_LABELS = {name: [f"{name}:{bound(b)}" for b in bounds] + [f"{name}:{INF}"] for name, bounds in HISTOGRAMS.items()}


def _observe(fields: Counter, name: str, bounds: tuple[float, ...], values: Iterable[float]) -> float:
    total, labels, find = 0.0, _LABELS[name], bisect.bisect_left
    for v in values:
        v = max(0.0, float(v))
        fields[labels[find(bounds, v)]] += 1  # first bound >= v: le is inclusive
        total += v
    return total


def record(pipe, keys: Keys, queue: str, *, done: int = 0, failed: int | None = None, retried: int = 0,
           dead: int = 0, run_times: Iterable[float] = (), waits: Iterable[float] = ()) -> None:
    """Add one batch's figures for `queue` to `pipe` (executed by the caller).

    done / retried / dead: items by outcome; failed defaults to retried + dead.
    run_times: seconds each item ran. waits: seconds from an item's enqueue to
    its start, for first attempts (see `enqueued_at`)."""
    fields = Counter({"done": done, "failed": retried + dead if failed is None else failed, "retried": retried,
                      "dead": dead})
    sums = {"run:sum": _observe(fields, "run", RUN_BUCKETS, run_times),
            "wait:sum": _observe(fields, "wait", WAIT_BUCKETS, waits)}
    _send(pipe, keys.stats(queue), fields, sums)


def record_buckets(pipe, keys: Keys, queue: str, *, done: int = 0, failed: int | None = None, retried: int = 0,
                   dead: int = 0, run_counts: Iterable[int] = (), wait_counts: Iterable[int] = (),
                   run_sum: float = 0.0, wait_sum: float = 0.0) -> None:
    """`record` with the run times and waits already counted per bucket (i:
    the i-th bound of RUN_BUCKETS / WAIT_BUCKETS, the last one +Inf) and
    summed: how a worker sends them, having bucketed each item once for
    these figures and the metrics history (history.Point)."""
    fields = Counter({"done": done, "failed": retried + dead if failed is None else failed, "retried": retried,
                      "dead": dead})
    for name, counts in (("run", run_counts), ("wait", wait_counts)):
        for label, n in zip(_LABELS[name], counts):
            if n:
                fields[label] += n
    _send(pipe, keys.stats(queue), fields, {"run:sum": run_sum, "wait:sum": wait_sum})


def _send(pipe, key: str, fields: Counter, sums: dict) -> None:
    for name, n in fields.items():
        if n:
            pipe.hincrby(key, name, n)
    for name, seconds in sums.items():
        if seconds:
            pipe.hincrbyfloat(key, name, round(seconds, 6))


# the worker's ack outcome -> the `record` argument it counts in ("cancelled" counts in none)
OUTCOMES = {"done": "done", "retry": "retried", "dead": "dead"}


def batch() -> dict:
    """Empty outcome counts of `record_buckets`, for a worker to fill between
    round trips (its run times and waits go to a history.Recorder)."""
    return {"done": 0, "retried": 0, "dead": 0}


def enqueued_at(entry_id: str) -> float:
    """When a stream entry was added (epoch seconds): its id is `<ms>-<seq>`."""
    return int(entry_id.partition("-")[0]) / 1000


# -- reading -------------------------------------------------------------------


@dataclass
class Histogram:
    buckets: list[tuple[str, int]]  # (le, cumulative count), ending with +Inf
    sum: float

    @property
    def count(self) -> int:
        return self.buckets[-1][1]


@dataclass
class QueueStats:
    counters: dict[str, int] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)


def _histogram(raw: dict, name: str, bounds: tuple[float, ...]) -> Histogram:
    running, buckets = 0, []
    for le in [bound(b) for b in bounds] + [INF]:
        running += int(raw.get(f"{name}:{le}", 0))
        buckets.append((le, running))
    return Histogram(buckets, float(raw.get(f"{name}:sum", 0.0)))


def parse(raw: dict) -> QueueStats:
    """A stats hash (str fields and values) as counters and cumulative histograms."""
    return QueueStats({c: int(raw.get(c, 0)) for c in COUNTERS},
                      {name: _histogram(raw, name, bounds) for name, bounds in HISTOGRAMS.items()})


def read(redis, keys: Keys, queues: Iterable[str]) -> dict[str, QueueStats]:
    """Every queue's figures, in one pipelined round trip."""
    queues = list(queues)
    pipe = redis.pipeline(transaction=False)
    for q in queues:
        pipe.hgetall(keys.stats(q))
    return {q: parse({_s(k): _s(v) for k, v in raw.items()}) for q, raw in zip(queues, pipe.execute())}


def _s(value) -> str:
    return value.decode() if isinstance(value, bytes) else value
