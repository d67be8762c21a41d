"""Making Redis clients from a URL, the same way in every process."""
from __future__ import annotations

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

# Errors after which a call may simply be tried again on a fresh connection.
RETRYABLE = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)


def connect(url: str, **kwargs) -> redis.Redis:
    """A client that decodes replies as text and retries a dropped connection briefly."""
    options = dict(
        decode_responses=True,
        health_check_interval=15,
        socket_keepalive=True,
        socket_connect_timeout=5,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=3),
        retry_on_error=list(RETRYABLE),
    )
    options.update(kwargs)
    return redis.Redis.from_url(url, **options)


def server_version(client: redis.Redis) -> tuple[int, ...]:
    return tuple(int(x) for x in client.info("server")["redis_version"].split(".")[:3])
