"""Per-token rate limits, counted in Redis so every web process shares them.

A fixed window: the token's calls in the current window (one counter key per
window, expiring with it). Over the limit, the call is refused with 429 and
`Retry-After` (seconds to the next window). QUEUEADMIN["API_RATE_LIMIT"] is
"N/s", "N/min", "N/h" or "N/day"; "" or "0" turns limiting off.
"""
from __future__ import annotations

import logging
import math
import re
import time

from .. import clients
from ..engine.errors import trouble
from .caps import rate_limit
from .errors import ApiError

log = logging.getLogger("queueadmin.api")

PERIODS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600,
           "d": 86400, "day": 86400}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*$")


def parse(text: str) -> tuple[int, int] | None:
    """"600/min" -> (600, 60); "100/10s" -> (100, 10); "" or "0" -> None (off)."""
    if not text or text.strip() == "0":
        return None
    m = _RATE.match(text.lower())
    if not m or m[3] not in PERIODS or int(m[1]) < 1:
        raise ValueError(f"API_RATE_LIMIT {text!r}: expected 'N/s', 'N/min', 'N/h' or 'N/day'")
    return int(m[1]), int(m[2] or 1) * PERIODS[m[3]]


def check(token_id) -> None:
    """Count one call of the token; ApiError 429 when it is over the limit."""
    rule = parse(rate_limit())
    if rule is None:
        return
    limit, seconds = rule
    now = time.time()
    window = int(now // seconds)
    client = clients.engine()
    key = client.keys.api_rate(str(token_id), window)
    try:
        pipe = client.redis.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, seconds + 1)
        count = pipe.execute()[0]
    except Exception as exc:  # a full Redis must not lock every reader out: count nothing
        if trouble(exc) not in ("OOM", "READONLY", "MISCONF", "NOREPLICAS"):
            raise
        log.warning("API rate limit not counted: %s", exc)
        return
    if count > limit:
        wait = max(1, math.ceil((window + 1) * seconds - now))
        raise ApiError(429, "rate_limited", f"rate limit reached: {limit} calls per {seconds} s for this token; "
                                            f"try again in {wait} s", {"Retry-After": str(wait)})
