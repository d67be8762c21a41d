"""Rate limits: at most N item starts in any window of a given length, for a
queue (a queue setting) or for one request (a submission option).

Written `20/s`, `600/min`, `10000/h` (also `5/10s`, `1/2min`). Enforced in the
dispatch script (`lua/cycle-18.lua`), where workers claim tokens, with a
sliding log: each claim under a limit adds an entry to the queue's `ratelog`
sorted set, scored by when it stops counting, and a count per limiter in the
queue's `rate` hash; a claim that would exceed a limit is not made, and the
token keeps waiting (no worker sleeps on it). The log lives in the queue's
hash slot, so the check is one atomic step however many workers claim.

An entry counts for the window plus a small margin (`margin_ms`): a worker
starts what it claimed a few milliseconds later, and the margin keeps those
start times, not only the claim times, within the limit.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass

MAX_COUNT = 100_000  # starts per window: the log holds one entry per start
MAX_WINDOW_MS = 7 * 86_400_000
UNITS_MS = {"s": 1000, "sec": 1000, "second": 1000, "m": 60_000, "min": 60_000, "minute": 60_000,
            "h": 3_600_000, "hr": 3_600_000, "hour": 3_600_000, "d": 86_400_000, "day": 86_400_000}
_PLURALS = {"secs", "seconds", "mins", "minutes", "hrs", "hours", "days"}
_UNIT_NAMES = {1000: "s", 60_000: "min", 3_600_000: "h", 86_400_000: "d"}
_PATTERN = re.compile(r"(\d{1,9})\s*/\s*(\d{0,6})\s*([a-z]+)")


class RateLimitError(ValueError):
    pass


@dataclass(frozen=True)
class Rate:
    count: int
    window_ms: int

    @property
    def text(self) -> str:
        """The canonical spelling: `20/s`, `600/min`, `5/10s`."""
        for unit_ms, name in sorted(_UNIT_NAMES.items(), reverse=True):
            if self.window_ms % unit_ms == 0:
                n = self.window_ms // unit_ms
                return f"{self.count}/{'' if n == 1 else n}{name}"
        raise AssertionError("windows are whole seconds")

    @property
    def spec(self) -> str:
        """What the dispatch script reads: `count|window_ms|margin_ms`."""
        return f"{self.count}|{self.window_ms}|{margin_ms(self.window_ms)}"

    def per_second(self) -> float:
        return self.count * 1000 / self.window_ms


def margin_ms(window_ms: int) -> int:
    """How much longer than its window a start counts: 1/20 of it, 50 ms to 1 s
    (with 25 ms, four busy workers showed a start delay that put 21 starts
    in one second of a 20/s queue)."""
    return min(1000, max(50, window_ms // 20))


def parse(text: str | None) -> Rate | None:
    """`20/s` -> Rate(20, 1000); "" or None -> None (no limit). Raises
    RateLimitError with a message fit for the user."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise RateLimitError("a rate limit is text such as 20/s, 600/min or 10000/h")
    clean = text.strip().lower()
    if not clean:
        return None
    m = _PATTERN.fullmatch(clean)
    unit = m and UNITS_MS.get(m.group(3) if m.group(3) not in _PLURALS else m.group(3)[:-1])
    if not m or not unit:
        raise RateLimitError(f"rate limit {text[:40]!r}: write a count per unit, such as 20/s, 600/min or 10000/h")
    count, multiple = int(m.group(1)), int(m.group(2) or 1)
    window = multiple * unit
    if not 1 <= count <= MAX_COUNT:
        raise RateLimitError(f"rate limit {text[:40]!r}: the count must be between 1 and {MAX_COUNT:,}")
    if not 1 <= multiple or window > MAX_WINDOW_MS:
        raise RateLimitError(f"rate limit {text[:40]!r}: the window must be between 1 second and 7 days")
    return Rate(count, window)


def canonical(text: str | None) -> str:
    """The canonical text of a limit ("" for none); raises RateLimitError."""
    rate = parse(text)
    return rate.text if rate else ""


def usage(redis, keys, queue: str, rids: list[str] = ()) -> dict[str, int]:
    """Starts counted now in each limiter's window: "" for the queue, else a
    request id."""
    qk = keys.queue(queue)
    pipe = redis.pipeline(transaction=False)
    pipe.hmget(qk.rate, ["n:", *(f"n:{rid}" for rid in rids)])
    pipe_stale(pipe, keys, queue)
    counts, stale = pipe.execute()
    return _less_stale({limiter: int(n or 0) for limiter, n in zip(["", *rids], counts)}, stale)


def pipe_stale(pipe, keys, queue: str) -> None:
    """Queue the read of log entries whose time is up but that no claim has
    trimmed yet (an idle queue's), so that they are not counted."""
    pipe.zrangebyscore(keys.queue(queue).ratelog, "-inf", int(time.time() * 1000), start=0, num=5000)


def _less_stale(counts: dict[str, int], stale: list[str]) -> dict[str, int]:
    for member in stale:
        limiter = member.rpartition("|")[0]
        if limiter in counts:
            counts[limiter] = max(0, counts[limiter] - 1)
    return counts


def summary(config: dict, rate_hash: dict, stale: list[str]) -> dict:
    """What the dashboard shows of a queue's limits, from its config hash, its
    `rate` hash and `pipe_stale`'s answer: {limit, used, throttled} for the
    queue (limit "" when it has none), and the same per request with a limit
    of its own under "requests"."""
    counts = _less_stale({k[2:]: int(v) for k, v in rate_hash.items() if k.startswith("n:")}, stale)

    def state(spec: str | None, limiter: str) -> dict:
        n, _, rest = (spec or "").partition("|")
        limit = Rate(int(n), int(rest.partition("|")[0])) if n.isdigit() and rest else None
        used = counts.get(limiter, 0)
        return {"limit": limit.text if limit else "", "used": used, "throttled": bool(limit and used >= limit.count)}

    requests = {k[4:]: state(v, k[4:]) for k, v in rate_hash.items() if k.startswith("lim:")}
    return {**state(config.get("rate_spec"), ""), "requests": requests,
            "requests_throttled": sum(1 for r in requests.values() if r["throttled"])}
