"""The metrics history: per-minute points for each queue and each processor,
kept in Redis for 14 days, and per-hour points for 90 days, so that the
dashboard can chart weeks of throughput, failures, waits and run times.

A series is a queue ("q:<name>"), a processor ("p:<dotted name>") or every
queue together ("all", what the overview charts). A
point is a compact text of counters (keys.history_minutes/history_hours),
each an upper-case name and a count in base 36 (lower case):

    D<done> F<failed> S<run ms> X<longest wait ms> R<i><n> ... W<i><n> ...

without spaces ("D2sF1S9ixXbkRE2sRF1WC2t"): short enough (typically under
64 bytes) for Redis to keep an hour's 60 points in one compact listpack.
D and F count outcomes (F = attempts that raised: retried + dead-lettered,
as stats.py counts them); S is the milliseconds items ran (busy time: S /
60,000 is the average number in flight over a minute); X is the longest
wait of the items that started (kept at its largest, not added: the chart
of how old the oldest waiting item was); R<i> and W<i> count run times and
waits in bucket i (A = 0, B = 1, ...) of stats.RUN_BUCKETS and
stats.WAIT_BUCKETS (i = len(bounds) for the last, open bucket), so p50 and
p95 of any span are read back by adding points. Only counters that are not
zero are kept. The worker's figures for /metrics (stats.py) are counted
from the same buckets, so an item is bucketed once for both.

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
ALL = "all"  # every queue together: the overview reads one series, whatever the number of queues
# Off only for the benchmark that measures what writing the history costs a worker (bench/history.py).
ENABLED = True
_PAIR = re.compile(r"([A-Z][A-Z]?)([0-9a-z]+)")
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
_INDEX = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # a bucket's index as one letter (there are at most 21 buckets)


def b36(n: int) -> str:
    """A count in base 36, lower case (the script writes its sums the same way)."""
    if n <= 0:
        return "0"
    out = ""
    while n:
        n, d = divmod(n, 36)
        out = _DIGITS[d] + out
    return out


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
    # seconds observed by this worker and not yet written (not in the text: S is run_ms + run_s in ms);
    # stats.py's sums come from them
    run_s: float = field(default=0.0, compare=False)
    wait_s: float = field(default=0.0, compare=False)

    @classmethod
    def parse(cls, text: str) -> "Point":
        """A point's text as written by `encode` (unknown names are skipped:
        a newer worker may add counters)."""
        return cls().add_text(text)

    def add_text(self, text: str) -> "Point":
        """Add a point's text to this one (reading many points costs no Point each)."""
        for name, n in _PAIR.findall(text):
            self._put(name, int(n, 36))
        return self

    def _put(self, name: str, n: int) -> None:
        if name == "D":
            self.done += n
        elif name == "F":
            self.failed += n
        elif name == "S":
            self.run_ms += n
        elif name == "X":
            self.max_wait_ms = max(self.max_wait_ms, n)
        elif len(name) == 2 and name[0] in "RW":
            counts = self.run if name[0] == "R" else self.wait
            i = ord(name[1]) - 65  # A = 0
            if i < len(counts):
                counts[i] += n

    def add(self, other: "Point") -> None:
        self.done += other.done
        self.failed += other.failed
        self.run_ms += other.run_ms
        self.max_wait_ms = max(self.max_wait_ms, other.max_wait_ms)
        self.run_s += other.run_s
        self.wait_s += other.wait_s
        for mine, theirs in ((self.run, other.run), (self.wait, other.wait)):
            for i, n in enumerate(theirs):
                if n:
                    mine[i] += n

    def observe(self, outcome_failed: bool | None, took: float, wait: float | None) -> None:
        """One finished attempt: done (False), failed (True) or neither (None:
        cancelled), its run time and, for a first attempt, its wait (s)."""
        if outcome_failed is False:
            self.done += 1
        elif outcome_failed:
            self.failed += 1
        if took < 0.0:
            took = 0.0
        self.run_s += took
        self.run[bisect.bisect_left(RUN_BUCKETS, took)] += 1
        if wait is not None:
            if wait < 0.0:  # clock skew between machines (stats.py)
                wait = 0.0
            self.wait_s += wait
            self.wait[bisect.bisect_left(WAIT_BUCKETS, wait)] += 1
            if wait * 1000 > self.max_wait_ms:
                self.max_wait_ms = int(wait * 1000)

    def encode(self) -> str:
        run_ms = self.run_ms + int(self.run_s * 1000)
        parts = [name + b36(n) for name, n in (("D", self.done), ("F", self.failed), ("S", run_ms),
                                               ("X", self.max_wait_ms)) if n]
        parts += ["R" + _INDEX[i] + b36(n) for i, n in enumerate(self.run) if n]
        parts += ["W" + _INDEX[i] + b36(n) for i, n in enumerate(self.wait) if n]
        return "".join(parts)

    def run_p(self, q: float) -> float | None:
        """The q-quantile (0..1) of run times, in seconds; None without any."""
        return quantile(self.run, RUN_BUCKETS, q)

    def wait_p(self, q: float) -> float | None:
        return quantile(self.wait, WAIT_BUCKETS, q)

    def busy(self, seconds: float) -> float:
        """The average number of items in flight over `seconds` (run time / span)."""
        return (self.run_ms / 1000 + self.run_s) / seconds if seconds else 0.0


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
        """The batch summed per queue, per processor and for all (ALL)."""
        out: dict[str, Point] = {}
        for (queue, processor), point in self.points.items():
            for series in (queue_series(queue), processor_series(processor), ALL):
                if series in out:
                    out[series].add(point)
                else:
                    out[series] = Point()
                    out[series].add(point)
        return out

    def put(self, store, trip, minute: int, series: dict[str, Point] | None = None) -> None:
        """Add the batch (`by_series`, when the caller has it) to minute
        `minute`'s points on `trip` (run by the caller)."""
        if not ENABLED:
            return
        for name, point in (self.by_series() if series is None else series).items():
            write(store, name, minute, point, trip)

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
                out[(minute - start) // step].add_text(_s(text))
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
