"""The Django side's clients of the engine, built from the settings (core/conf.py).

* `connect_redis(settings)`: the one factory of a Redis client from settings
  (a `Redis`, or a `RedisCluster` for a `redis+cluster://` URL or
  REDIS_CLUSTER); the worker's fast path (core/launch.py) calls it with the
  settings module it read before Django is set up.
* `redis_client()` and `engine()`: one of each per process, made on first use.
* `reset()`: forget them (tests point REDIS_URL elsewhere; forked workers
  open their own).

A leaf: it imports the settings reader and the engine, nothing of Django's.
"""
from __future__ import annotations

import functools

from queueadmin.core import conf
from queueadmin.core.engine.client.queue_client import QueueClient
from queueadmin.core.engine.store.connection import connect


def connect_redis(settings=None):
    """A new Redis client for the settings' REDIS_URL (Django's settings by default)."""
    return connect(conf.redis_url(settings), cluster=conf.redis_cluster(settings),
                   wait_replicas=(conf.get("WAIT_REPLICAS", settings), conf.get("WAIT_TIMEOUT_MS", settings)))


@functools.cache
def redis_client():
    return connect_redis()


@functools.cache
def engine() -> QueueClient:
    return QueueClient(redis_client(), prefix=conf.get("PREFIX"), processors=conf.processors().keys())


def reset() -> None:
    """Forget the cached clients."""
    redis_client.cache_clear()
    engine.cache_clear()
