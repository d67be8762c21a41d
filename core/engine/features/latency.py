"""Queue latency: how long the oldest item still waiting in a queue has
waited (what Sidekiq shows per queue and what autoscalers read), worked
out at read time from figures the readers already have, so it costs no
extra round trip and no write on the hot path.

An item of a request waits from the time its request was made, or from its
not-before time when that is later (a delayed request waits only once it
is due); a request waits while it has items neither finished nor in
flight. Items added later to a streamed request are counted from the
request's creation, so a long-open stream reads as old: the figure errs on
the side of scaling up.
"""
from __future__ import annotations

import time
from typing import Iterable


def waiting_since(created_at: float | None, not_before: float | None) -> float | None:
    """When a request's items started waiting (epoch seconds)."""
    if created_at is None:
        return not_before
    return max(created_at, not_before or 0.0)


def oldest(since: Iterable[float | None]) -> float | None:
    """The earliest of the waiting requests' `waiting_since` times."""
    return min((s for s in since if s is not None), default=None)


def age(oldest_since: float | None, now: float | None = None) -> float:
    """Seconds the oldest waiting item has waited; 0 when nothing waits."""
    if oldest_since is None:
        return 0.0
    return max(0.0, (time.time() if now is None else now) - oldest_since)
