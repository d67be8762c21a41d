"""The metrics history: per-minute points for each queue and each processor,
kept in Redis for 14 days, and per-hour points for 90 days, so that the
dashboard can chart weeks of throughput, failures, waits and run times.

A series is a queue ("q:<name>") or a processor ("p:<dotted name>"). A
point is a compact text of counters (keys.history_minutes/history_hours):

    d=<done> f=<failed> s=<run ms> x=<longest wait ms> r<i>=<n> ... w<i>=<n> ...

d and f count outcomes (f = attempts that raised: retried + dead-lettered,
as stats.py counts them); s is the milliseconds items ran (busy time: s /
60,000 is the average number in flight over a minute); x is the longest
wait of the items that started (kept at its largest, not added: the chart
of how old the oldest waiting item was); r<i> and w<i> count
run times and waits in bucket i of stats.RUN_BUCKETS and stats.WAIT_BUCKETS
(i = len(bounds) for the last, open bucket), so p50 and p95 of any span
are read back by adding points. Only counters that are not zero are kept.

Workers write it in the round trip that already carries their figures (at
most once a second while busy, outcomes.py): one `history_add` call per
series that finished items, which adds the batch to the minute's point and
to the hour's point (downsampled as it is written, no compaction job).
Both expire: the minute points of an hour KEEP_MINUTES seconds after their
last write, the hour points of a day KEEP_HOURS seconds after, so memory is
bounded by the number of series whatever the traffic (bench/history.py
measures it).
"""
from __future__ import annotations

import bisect
import re
import time
from dataclasses import dataclass, field

from queueadmin.core.engine.features.stats import RUN_BUCKETS, WAIT_BUCKETS
from queueadmin.core.engine.store.keys import Keys

KEEP_MINUTES = 15 * 86400  # 14 days of per-minute points, and a day's margin for the hour being written
KEEP_HOURS = 91 * 86400  # 90 days of per-hour points
QUEUE, PROCESSOR = "q:", "p:"
# Off only for the benchmark that measures what writing the history costs a worker (bench/history.py).
ENABLED = True
_PAIR = re.compile(r"([a-z]+)(\d*)=(\d+)")


def queue_series(name: str) -> str:
    return QUEUE + name


def processor_series(name: str) -> str:
    return PROCESSOR + name


@dataclass
class Point:
    """The counters of one span of time (a minute, an hour, or many added)."""

    done: int = 0
    failed: int = 0
    run_ms: int = 0
    max_wait_ms: int = 0
    run: list[int] = field(default_factory=lambda: [0] * (len(RUN_BUCKETS) + 1))
    wait: list[int] = field(default_factory=lambda: [0] * (len(WAIT_BUCKETS) + 1))

    @classmethod
    def parse(cls, text: str) -> "Point":
        """A point's text as written by `encode` (unknown names are skipped:
        a newer worker may add counters)."""
        p = cls()
        for name, i, n in _PAIR.findall(text):
            p._put(name, i, int(n))
        return p

    def _put(self, name: str, i: str, n: int) -> None:
        if name == "d":
            self.done += n
        elif name == "f":
            self.failed += n
        elif name == "s":
            self.run_ms += n
        elif name == "x":
            self.max_wait_ms = max(self.max_wait_ms, n)
        elif name in ("r", "w") and i:
            counts = self.run if name == "r" else self.wait
            if int(i) < len(counts):
                counts[int(i)] += n

    def add(self, other: "Point") -> None:
        self.done += other.done
        self.failed += other.failed
        self.run_ms += other.run_ms
        self.max_wait_ms = max(self.max_wait_ms, other.max_wait_ms)
        self.run = [a + b for a, b in zip(self.run, other.run)]
        self.wait = [a + b for a, b in zip(self.wait, other.wait)]

    def observe(self, outcome_failed: bool | None, took: float, wait: float | None) -> None:
        """One finished attempt: done (False), failed (True) or neither (None:
        cancelled), its run time and, for a first attempt, its wait (s)."""
        if outcome_failed is False:
            self.done += 1
        elif outcome_failed:
            self.failed += 1
        took = max(0.0, took)
        self.run_ms += int(took * 1000)
        self.run[bisect.bisect_left(RUN_BUCKETS, took)] += 1
        if wait is not None:
            wait = max(0.0, wait)
            self.wait[bisect.bisect_left(WAIT_BUCKETS, wait)] += 1
            if wait * 1000 > self.max_wait_ms:
                self.max_wait_ms = int(wait * 1000)

    def encode(self) -> str:
        parts = [f"{name}={n}" for name, n in (("d", self.done), ("f", self.failed), ("s", self.run_ms),
                                                     ("x", self.max_wait_ms)) if n]
        parts += [f"r{i}={n}" for i, n in enumerate(self.run) if n]
        parts += [f"w{i}={n}" for i, n in enumerate(self.wait) if n]
        return " ".join(parts)

    def run_p(self, q: float) -> float | None:
        """The q-quantile (0..1) of run times, in seconds; None without any."""
        return quantile(self.run, RUN_BUCKETS, q)

    def wait_p(self, q: float) -> float | None:
        return quantile(self.wait, WAIT_BUCKETS, q)

    def busy(self, seconds: float) -> float:
        """The average number of items in flight over `seconds` (run time / span)."""
        return self.run_ms / 1000 / seconds if seconds else 0.0


def quantile(counts: list[int], bounds: tuple[float, ...], q: float) -> float | None:
    """Linear interpolation inside the bucket where the q-th observation
    falls (as Prometheus' histogram_quantile); the open last bucket answers
    its lower bound."""
    total = sum(counts)
    if not total:
        return None
    rank, seen = q * total, 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i == len(bounds):
                return bounds[-1]
            low = bounds[i - 1] if i else 0.0
            return low + (bounds[i] - low) * max(0.0, rank - seen) / n
        seen += n
    return bounds[-1]


class Recorder:
    """What a worker finished since it last wrote the history, per queue and
    processor (owned by outcomes.Outcomes; written with its figures)."""

    __slots__ = ("points",)

    def __init__(self):
        self.points: dict[tuple[str, str], Point] = {}

    def observe(self, queue: str, processor: str, failed: bool | None, took: float, wait: float | None) -> None:
        point = self.points.get((queue, processor))
        if point is None:
            point = self.points[(queue, processor)] = Point()
        point.observe(failed, took, wait)

    def by_series(self) -> dict[str, Point]:
        """The batch summed per queue and per processor."""
        out: dict[str, Point] = {}
        for (queue, processor), point in self.points.items():
            for series in (queue_series(queue), processor_series(processor)):
                if series in out:
                    out[series].add(point)
                else:
                    out[series] = Point()
                    out[series].add(point)
        return out

    def put(self, store, trip, minute: int) -> None:
        """Add the batch to minute `minute`'s points on `trip` (run by the caller)."""
        if not ENABLED:
            return
        for series, point in self.by_series().items():
            write(store, series, minute, point, trip)

    def clear(self) -> None:
        self.points = {}


def write(store, series: str, minute: int, point: Point, trip=None) -> None:
    """Add `point` to `series` at `minute` (minutes since the epoch); also how
    tests and the benchmark write points at times they choose."""
    store.history.history_add(series, minute, point.encode(), KEEP_MINUTES, KEEP_HOURS, trip=trip)


# -- reading -------------------------------------------------------------------


def read(redis, keys: Keys, series: list[str], start: int, end: int, step: int) -> list[Point]:
    """Points of `series` (added together) from minute `start` to `end`
    (inclusive), one per `step` minutes: per-minute points, or per-hour ones
    when `step` is whole hours (ranges past 14 days need them). One
    pipelined round trip."""
    hourly = step % 60 == 0
    n = (end - start) // step + 1
    out = [Point() for _ in range(n)]
    pipe = redis.pipeline(transaction=False)
    spans = []
    for s in series:
        if hourly:
            for day in range(start // 1440, end // 1440 + 1):
                pipe.hgetall(keys.history_hours(s, day))
                spans.append((day * 1440, 60))
        else:
            for hour in range(start // 60, end // 60 + 1):
                pipe.hgetall(keys.history_minutes(s, hour))
                spans.append((hour * 60, 1))
    for (base, unit), raw in zip(spans, pipe.execute()):
        for f, text in raw.items():
            minute = base + int(_s(f)) * unit
            if start <= minute <= end:  # hourly: `start` is a whole hour (the caller aligns it)
                out[(minute - start) // step].add(Point.parse(_s(text)))
    return out


def recent(redis, keys: Keys, series: list[str], minutes: int = 60, now: float | None = None) -> Point:
    """The last `minutes` (this one included) of `series` as one point: the
    wait and run percentiles a status line shows."""
    end = int((time.time() if now is None else now) // 60)
    total = Point()
    for p in read(redis, keys, series, end - minutes + 1, end, 1):
        total.add(p)
    return total


def _s(value) -> str:
    return value.decode() if isinstance(value, bytes) else value
