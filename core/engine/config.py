"""Queue settings: defaults for requests and the knobs workers read live.

The Django admin edits them in the database and pushes them to Redis (the
queue's `config` hash), which is what every process reads, so a change
reaches running workers without a restart.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from queueadmin.core.engine.features import ratelimit

MAX_CONCURRENCY = 10_000


@dataclass(frozen=True)
class QueueConfig:
    priority: int = 50  # default priority of requests (0-99, higher first)
    concurrency: int = 10  # default per-request concurrency limit
    lease_seconds: float = 60.0  # visibility timeout of a taken item
    max_attempts: int = 3  # attempts before an item is dead-lettered
    backoff_seconds: float = 1.0  # first retry delay; doubles each attempt
    backoff_max_seconds: float = 300.0
    retention_seconds: int = 86_400  # how long a finished request stays in Redis
    paused: bool = False
    time_limit_seconds: float = 3600.0  # an item running longer is stopped (0 = no limit)
    rate_limit: str = ""  # at most this many item starts per window, e.g. "20/s" ("" = none; ratelimit.py)
    unrunnable_seconds: float = 3600.0  # an item no live worker can run fails after this long (routing.py)
    encrypt: bool = False  # payloads, results and logs sealed at rest (features/encryption.py)
    group_concurrency: int = 0  # default items of one group in flight at once (0 = no limit; features/groups.py)
    group_rate_limit: str = ""  # default item starts per window of one group, e.g. "5/s" ("" = none)

    def backoff(self, attempt: int) -> float:
        """Delay before the retry that follows attempt number `attempt`."""
        return min(self.backoff_max_seconds, self.backoff_seconds * 2 ** (attempt - 1))

    @property
    def lease_ms(self) -> int:
        return int(self.lease_seconds * 1000)

    @property
    def retention_ms(self) -> int:
        return int(self.retention_seconds * 1000)

    def to_redis(self) -> dict[str, str]:
        """The config hash; `rate_spec` is the rate limit as the dispatch script reads it."""
        out = {k: str(int(v) if isinstance(v, bool) else v) for k, v in asdict(self).items()}
        rate = ratelimit.parse(self.rate_limit)
        out["rate_limit"], out["rate_spec"] = (rate.text, rate.spec) if rate else ("", "")
        group_rate = ratelimit.parse(self.group_rate_limit)
        out["group_rate_limit"], out["group_rate_spec"] = (group_rate.text, group_rate.spec) if group_rate else ("", "")
        return out

    @classmethod
    def from_redis(cls, raw: dict[str, str]) -> "QueueConfig":
        values = {}
        for f in fields(cls):
            if f.name not in raw:
                continue
            text = raw[f.name]
            if f.type in ("bool", bool):
                values[f.name] = text in ("1", "True", "true")
            elif f.type in ("int", int):
                values[f.name] = int(float(text))
            elif f.type in ("str", str):
                values[f.name] = text
            else:
                values[f.name] = float(text)
        return cls(**values)

    def validate(self) -> None:
        if not 0 <= self.priority <= 99:
            raise ValueError("priority must be between 0 and 99")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency must be between 1 and {MAX_CONCURRENCY}")
        if self.lease_seconds <= 0 or self.max_attempts < 1 or self.backoff_seconds < 0:
            raise ValueError("lease must be positive, max attempts at least 1, backoff not negative")
        if self.retention_seconds < 1:
            raise ValueError("retention must be at least one second")
        if self.time_limit_seconds < 0:
            raise ValueError("time limit must not be negative (0 = no limit)")
        if not self.unrunnable_seconds >= 0:
            raise ValueError("the wait for a worker that can run an item must not be negative")
        ratelimit.parse(self.rate_limit)  # RateLimitError (a ValueError) when malformed
        if not 0 <= self.group_concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"group concurrency must be between 0 (no limit) and {MAX_CONCURRENCY}")
        ratelimit.parse(self.group_rate_limit)
