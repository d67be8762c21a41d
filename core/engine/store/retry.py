"""Which Redis errors a call may simply be tried again after, and how often.

The base of the connection modules (connection.py, cluster.py,
replicas.py): they all import it, it imports none of them.
"""
from __future__ import annotations

import socket
import time

import redis
from redis.exceptions import ClusterDownError, ReadOnlyError, SlotNotCoveredError, TryAgainError
from redis.retry import Retry


class ClusterUnavailable(redis.ConnectionError):
    """No cluster node answers, or the nodes do not agree on the slots yet (a
    failover in progress): like a dropped connection, worth trying again."""


# Errors after which a call may simply be tried again on a fresh connection
# (on a cluster: also while a failover moves slots to a promoted replica).
RETRYABLE = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, ClusterDownError, TryAgainError,
             SlotNotCoveredError, ReadOnlyError)


class BoundedRetry(Retry):
    """redis-py's Retry, except that a second timeout ends the retries: one
    retry on a fresh connection helps when only the old one went stale, but a
    server that stays silent would otherwise cost (retries + 1) timeouts."""

    def call_with_retry(self, do, fail, is_retryable=None, with_failure_count=False):
        # the same signature as redis-py's own, whose later versions (7.x, 8.x) pass the last two
        self._backoff.reset()
        failures = timeouts = 0
        while True:
            try:
                return do()
            except self._supported_errors as error:
                if is_retryable is not None and not is_retryable(error):
                    raise
                failures += 1
                timeouts += isinstance(error, (redis.TimeoutError, socket.timeout))
                fail(error, failures) if with_failure_count else fail(error)
                if (self._retries >= 0 and failures > self._retries) or timeouts > 1:
                    raise error
                backoff = self._backoff.compute(failures)
                if backoff > 0:
                    time.sleep(backoff)
