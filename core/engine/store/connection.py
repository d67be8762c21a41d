"""Making Redis clients from a URL, the same way in every process.

* ``redis://host:port/db`` (or ``rediss://``): one server, redis-py's ``Redis``.
* ``redis+cluster://host:port[,host:port...]`` (or ``rediss+cluster://``), or
  any ``redis://`` URL with ``cluster=True`` (the ``REDIS_CLUSTER`` setting):
  a Redis Cluster, through :class:`Cluster`, redis-py's ``RedisCluster`` with
  what the engine needs on top (see its docstring). Several startup nodes may
  be listed, so a process started while one node is down still finds the
  cluster.

``wait_replicas=(n, timeout_ms)`` (the ``WAIT_REPLICAS`` setting): writes wait
for n replicas (replicas.py for one server, cluster.py per node).

Every connection has a socket timeout and TCP keepalive (see SOCKET_TIMEOUT),
so a Redis that stops answering without closing the connection (a network
partition, a frozen host) is noticed within seconds instead of hanging a
worker or a command; ``?socket_timeout=`` in the URL overrides it.
"""
from __future__ import annotations

import itertools
import socket
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from queueadmin.core.engine.store.cluster import Cluster
from queueadmin.core.engine.store.replicas import NO_REPLICA_BACKOFF, WaitingRedis
from queueadmin.core.engine.store.retry import RETRYABLE, BoundedRetry, ClusterUnavailable

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
# Seconds a reply may take. Above the longest blocking call the engine makes
# (a worker's BLPOP of at most 1 s; WAIT gets its own timeout plus a margin):
# redis-py does not extend the socket timeout for blocking commands.
SOCKET_TIMEOUT = 5.0
CONNECT_TIMEOUT = 5.0
# TCP keepalive on Linux: an idle pooled connection to a vanished host is
# dropped after 5 s of silence and 3 unanswered probes 2 s apart.
KEEPALIVE_OPTIONS = {getattr(socket, name): value
                     for name, value in (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 3))
                     if hasattr(socket, name)}


def is_cluster_url(url: str) -> bool:
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def timeouts(wait_replicas: tuple[int, int] | None = None) -> dict:
    """Socket timeout and keepalive options for every connection; with WAIT,
    the timeout leaves room for WAIT's own."""
    wait_s = wait_replicas[1] / 1000 if wait_replicas and wait_replicas[0] > 0 else 0
    return dict(socket_timeout=max(SOCKET_TIMEOUT, wait_s + 2), socket_connect_timeout=CONNECT_TIMEOUT,
                socket_keepalive=True, socket_keepalive_options=dict(KEEPALIVE_OPTIONS))


def connect(url: str, *, cluster: bool | None = None, wait_replicas: tuple[int, int] | None = None, **kwargs):
    """A client that decodes replies as text, times out on a silent server and
    retries a dropped connection briefly: a ``Cluster`` for a cluster URL (or
    ``cluster=True``), else a ``Redis``."""
    if cluster or is_cluster_url(url):
        return connect_cluster(url, wait_replicas=wait_replicas, **kwargs)
    options = dict(
        decode_responses=True,
        health_check_interval=15,
        **timeouts(wait_replicas),
        retry=BoundedRetry(ExponentialBackoff(cap=1.0, base=0.05), retries=3),
        retry_on_error=list(RETRYABLE),
    )
    options.update(kwargs)
    if wait_replicas and wait_replicas[0] > 0:
        client = WaitingRedis.from_url(url, **options)
        client.wait_replicas = (int(wait_replicas[0]), int(wait_replicas[1]))
        return client
    return redis.Redis.from_url(url, **options)


def cluster_nodes(url: str) -> tuple[list[tuple[str, int]], dict]:
    """The startup nodes and connection options of a cluster URL."""
    parts = urlsplit(url)
    scheme = CLUSTER_SCHEMES.get(parts.scheme, parts.scheme)
    netloc = parts.netloc
    options: dict = {}
    if "@" in netloc:
        auth, netloc = netloc.rsplit("@", 1)
        user, _, password = auth.partition(":")
        if user:
            options["username"] = unquote(user)
        if password:
            options["password"] = unquote(password)
    if parts.path.strip("/") not in ("", "0"):
        raise ValueError("a Redis Cluster has only database 0")
    nodes = []
    for hostport in netloc.split(","):
        host, _, port = hostport.strip().rpartition(":")
        if not host:
            host, port = hostport.strip(), "6379"
        nodes.append((host.strip("[]") or "127.0.0.1", int(port or 6379)))
    if scheme == "rediss":
        options["ssl"] = True
    for key, values in parse_qs(parts.query).items():
        if key in ("socket_timeout", "socket_connect_timeout"):
            options[key] = float(values[-1])
    return nodes, options


def connect_cluster(url: str, wait_replicas: tuple[int, int] | None = None, **kwargs) -> "Cluster":
    nodes, options = cluster_nodes(url)
    options = {
        "decode_responses": True,
        **timeouts(wait_replicas),
        "health_check_interval": 15,
        # cluster-level retries (each one re-reads the slot map): a failover
        # takes a couple of node timeouts; the worker loop backs off after these
        "retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=3),
        **options,
    }
    kwargs.pop("retry_on_error", None)  # per-node retries are off in cluster mode
    options.update(kwargs)
    try:
        client = Cluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes], **options)
    except RedisClusterException as exc:
        raise ClusterUnavailable(str(exc)) from exc
    if wait_replicas and wait_replicas[0] > 0:
        client.wait_replicas = (int(wait_replicas[0]), int(wait_replicas[1]))
    return client


_pubsub_turn = itertools.count()


def pubsub_client(url: str, **kwargs):
    """An asyncio client to SUBSCRIBE with (the dashboard's relay). On a cluster
    a plain PUBLISH reaches every node (the cluster bus broadcasts it), so any
    node will do: each call takes the next node of the URL, so that after a
    node died a reconnect tries another one."""
    import redis.asyncio as aioredis  # here: only the dashboard's relay needs asyncio (a worker starts faster)

    # get_message(timeout=...) waits with its own timeout; the socket timeout
    # bounds (UN)SUBSCRIBE and PING, keepalive drops a vanished server
    options = dict(decode_responses=True, health_check_interval=15, **timeouts())
    options.update(kwargs)
    if not is_cluster_url(url):
        return aioredis.Redis.from_url(url, **options)
    nodes, extra = cluster_nodes(url)
    host, port = nodes[next(_pubsub_turn) % len(nodes)]
    return aioredis.Redis(host=host, port=port, **{**extra, **options})


def server_version(client) -> tuple[int, ...]:
    return tuple(int(x) for x in client.info("server")["redis_version"].split(".")[:3])


def supports_sharded_pubsub(client) -> bool:
    """SPUBLISH/SSUBSCRIBE exist from Redis 7.0 (our embedded server is 6.2)."""
    return server_version(client) >= (7, 0, 0)


__all__ = ["RETRYABLE", "NO_REPLICA_BACKOFF", "BoundedRetry", "Cluster", "ClusterUnavailable", "WaitingRedis", "connect",
           "connect_cluster", "cluster_nodes", "pubsub_client", "server_version", "supports_sharded_pubsub", "timeouts"]
