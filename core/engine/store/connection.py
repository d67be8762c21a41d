"""Making Redis clients from a URL, the same way in every process.

* ``redis://host:port/db`` (or ``rediss://``): one server, redis-py's ``Redis``.
* ``redis+cluster://host:port[,host:port...]`` (or ``rediss+cluster://``), or
  any ``redis://`` URL with ``cluster=True`` (the ``REDIS_CLUSTER`` setting):
  a Redis Cluster, through :class:`Cluster`, redis-py's ``RedisCluster`` with
  what the engine needs on top (see its docstring). Several startup nodes may
  be listed, so a process started while one node is down still finds the
  cluster.

``wait_replicas=(n, timeout_ms)`` (the ``WAIT_REPLICAS`` setting) makes every
pipeline that writes and every script call end with ``WAIT n timeout`` on the
connection that carried the writes, so that an acknowledged item or an
accepted submission is on n replicas before the call returns (see
docs/keys.md, "Failover"); single plain commands are not covered. A node
whose WAIT times out short of n replicas (a promoted replica whose old master
is gone) is written to without WAIT for NO_REPLICA_BACKOFF seconds, then tried
again: waiting cannot make a write safer where no replica exists.

Every connection has a socket timeout and TCP keepalive (see SOCKET_TIMEOUT),
so a Redis that stops answering without closing the connection (a network
partition, a frozen host) is noticed within seconds instead of hanging a
worker or a command; ``?socket_timeout=`` in the URL overrides it.
"""
from __future__ import annotations

import itertools
import logging
import random
import socket
import time
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.client import Pipeline
from redis.cluster import ClusterNode, ClusterPipeline, PipelineCommand, RedisCluster
from redis.commands.cluster import READ_COMMANDS
from redis.exceptions import (ClusterDownError, NoScriptError, ReadOnlyError, RedisClusterException,
                              SlotNotCoveredError, TryAgainError)
from redis.retry import Retry

log = logging.getLogger("queueadmin.connection")

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
NO_REPLICA_BACKOFF = 10.0  # seconds without WAIT on a node whose WAIT found no replica in time
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


class ClusterUnavailable(redis.ConnectionError):
    """No cluster node answers, or the nodes do not agree on the slots yet (a
    failover in progress): like a dropped connection, worth trying again."""


# Errors after which a call may simply be tried again on a fresh connection
# (on a cluster: also while a failover moves slots to a promoted replica).
RETRYABLE = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, ClusterDownError, TryAgainError,
             SlotNotCoveredError, ReadOnlyError)

_TOPOLOGY_ERRORS = ("Redis Cluster cannot be connected", "startup_nodes could not agree",
                    "All slots are not covered")


def is_cluster_url(url: str) -> bool:
    return urlsplit(url).scheme in CLUSTER_SCHEMES


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
    import redis.asyncio as aioredis

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


def _writes(args) -> bool:
    name = str(args[0]).upper()
    return name not in READ_COMMANDS and name not in ("WAIT", "PING", "XRANGE", "XPENDING", "ZRANGEBYSCORE",
                                                      "ZMSCORE", "XLEN", "TYPE", "EXISTS", "HSCAN", "SSCAN")


class Cluster(RedisCluster):
    """``RedisCluster`` plus what the engine relies on:

    * Lua scripts inside pipelines: redis-py blocks EVALSHA in a cluster
      pipeline (it cannot handle NOSCRIPT there). :class:`ClusterBatch` allows
      it, and re-sends only the calls a node refused with NOSCRIPT (a node that
      restarted with an empty script cache) after loading their scripts: a
      refused script did not run, so nothing runs twice.
    * ``blpop`` over keys in several slots (a worker serving several queues
      blocks on each queue's wake list): one BLPOP cannot span slots, so the
      lists are checked in one pipelined round trip, then each is blocked on in
      turn for a short slice until the timeout.
    * Errors while the nodes disagree on the slot map (during a failover)
      surface as :class:`ClusterUnavailable`, a ``ConnectionError``, which every
      process already retries with a backoff.
    * ``wait_replicas``: see the module docstring.
    """

    BLOCK_SLICE = 0.05  # seconds blocked on one of several wake lists before the next

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.wait_replicas = (0, 0)
        self._no_replica_until: dict[str, float] = {}  # node name -> monotonic time
        self._script_texts: dict[str, str] = {}

    def register_script(self, script):
        s = super().register_script(script)
        self._script_texts[s.sha] = script
        return s

    def load_scripts(self, shas) -> None:
        """Load scripts (by sha, as registered) on every node, replicas too, so
        that a replica promoted by a failover already has them."""
        texts = [self._script_texts[sha] for sha in shas if sha in self._script_texts]
        for node in self.get_nodes():
            for text in texts:
                try:
                    self.execute_command("SCRIPT LOAD", text, target_nodes=node)
                except RETRYABLE:
                    break  # a node that is down; the call it refused is retried like any other

    def execute_command(self, *args, **kwargs):
        try:
            return super().execute_command(*args, **kwargs)
        except RedisClusterException as exc:
            if str(exc).startswith(_TOPOLOGY_ERRORS):
                raise ClusterUnavailable(str(exc)) from exc
            raise

    def _execute_command(self, target_node, *args, **kwargs):
        try:
            return super()._execute_command(target_node, *args, **kwargs)
        except AttributeError as exc:
            # Re-reading the slot map (after a node failed) disconnects the
            # node's pool, connections other threads are using included: their
            # parser is gone mid-reply. That is a dropped connection; retried.
            if "NoneType" not in str(exc):
                raise
            raise redis.ConnectionError(f"connection closed by a slot map refresh: {exc}") from exc

    def _wait_targets(self, names) -> list[str]:
        now = time.monotonic()
        return [n for n in names if self._no_replica_until.get(n, 0) <= now]

    def _waited(self, name: str, acked) -> None:
        if isinstance(acked, int) and acked < self.wait_replicas[0]:
            if self._no_replica_until.get(name, 0) <= time.monotonic():
                log.warning("WAIT on %s: %s of %s replica(s) in %s ms; writing without WAIT for %.0fs",
                            name, acked, self.wait_replicas[0], self.wait_replicas[1], NO_REPLICA_BACKOFF)
            self._no_replica_until[name] = time.monotonic() + NO_REPLICA_BACKOFF

    def evalsha(self, sha, numkeys, *keys_and_args):
        if self.wait_replicas[0]:  # the WAIT must follow on the same connection
            pipe = self.pipeline()
            pipe.evalsha(sha, numkeys, *keys_and_args)
            return pipe.execute()[0]
        return super().evalsha(sha, numkeys, *keys_and_args)

    def pipeline(self, transaction=None, shard_hint=None):
        if transaction:  # WATCH/MULTI in one slot: redis-py's own transaction pipeline
            return super().pipeline(transaction=transaction, shard_hint=shard_hint)
        if shard_hint:
            raise RedisClusterException("shard_hint is deprecated in cluster mode")
        pipe = ClusterBatch(
            nodes_manager=self.nodes_manager,
            commands_parser=self.commands_parser,
            startup_nodes=self.nodes_manager.startup_nodes,
            result_callbacks=self.result_callbacks,
            cluster_response_callbacks=self.cluster_response_callbacks,
            read_from_replicas=self.read_from_replicas,
            load_balancing_strategy=self.load_balancing_strategy,
            reinitialize_steps=self.reinitialize_steps,
            retry=self.retry,
            lock=self._lock,
            transaction=False,
        )
        pipe.owner = self
        return pipe

    def blpop(self, keys, timeout=0):
        keys = [keys] if isinstance(keys, (str, bytes)) else list(keys)
        if len({self.keyslot(k) for k in keys}) <= 1:
            return super().blpop(keys, timeout=timeout)
        pipe = self.pipeline()
        for k in keys:
            pipe.llen(k)
        for k, n in zip(keys, pipe.execute()):
            if n:
                got = self.lpop(k)
                if got is not None:
                    return [k, got]
        deadline = time.monotonic() + timeout if timeout else None  # 0: block until something comes
        for i in itertools.count(random.randrange(len(keys))):
            left = deadline - time.monotonic() if deadline is not None else self.BLOCK_SLICE
            if left <= 0:
                return None
            got = super().blpop([keys[i % len(keys)]], timeout=max(0.01, min(self.BLOCK_SLICE, left)))
            if got is not None:
                return got


class _Sticky(dict):
    """Command options whose pop() leaves the value in place."""

    def pop(self, key, default=None):
        return self.get(key, default)


class ClusterBatch(ClusterPipeline):
    """A non-transactional cluster pipeline in which Lua scripts may be called
    (see :class:`Cluster`); commands go to their slots' nodes in one round trip
    per node."""

    owner: Cluster

    @property
    def command_stack(self):  # redis-py's Pipeline name for the queued commands
        strategy = self.__dict__.get("_execution_strategy")
        return strategy.command_queue if strategy is not None else []

    @command_stack.setter
    def command_stack(self, value):
        pass  # ClusterPipeline.__init__ assigns it; the strategy holds the queue

    def evalsha(self, sha, numkeys, *keys_and_args):
        return self.execute_command("EVALSHA", sha, numkeys, *keys_and_args)

    def execute(self, raise_on_error: bool = True):
        stack = list(self._execution_strategy.command_queue)
        if not stack:
            return []
        n_wait, wait_ms = self.owner.wait_replicas
        waited: list[str] = []
        if n_wait:
            written = {}
            for c in stack:
                if _writes(c.args):
                    node = self._execution_strategy._determine_nodes(*c.args)[0]
                    written[node.name] = node
            for name in self.owner._wait_targets(written):
                # last on the node's connection, after its writes; the target
                # survives redis-py's re-sends of the batch (it pops options)
                self._execution_strategy.command_queue.append(
                    PipelineCommand(("WAIT", n_wait, wait_ms), _Sticky(target_nodes=written[name]),
                                    len(self._execution_strategy.command_queue)))
                waited.append(name)
        try:
            results = super().execute(raise_on_error=False)
        except RedisClusterException as exc:
            if str(exc).startswith(_TOPOLOGY_ERRORS):
                raise ClusterUnavailable(str(exc)) from exc
            raise
        except AttributeError as exc:  # see Cluster._execute_command
            if "NoneType" not in str(exc):
                raise
            raise redis.ConnectionError(f"connection closed by a slot map refresh: {exc}") from exc
        refused = [i for i, r in enumerate(results[:len(stack)]) if isinstance(r, NoScriptError)]
        if refused:
            self.owner.load_scripts({stack[i].args[1] for i in refused})
            again = self.owner.pipeline()
            for i in refused:
                again.execute_command(*stack[i].args)
            for i, r in zip(refused, again.execute(raise_on_error=False)):
                results[i] = r
        if waited:
            for name, acked in zip(waited, results[len(stack):]):
                self.owner._waited(name, acked)
            results = results[:len(stack)]
        if raise_on_error:
            for i, r in enumerate(results):
                if isinstance(r, Exception):
                    self.annotate_exception(r, i + 1, stack[i].args)
                    raise r
        return results


class WaitingRedis(redis.Redis):
    """A one-server client whose write round trips end with WAIT (see module docstring)."""

    wait_replicas = (0, 0)
    no_replica_until = 0.0  # monotonic time until which writes go without WAIT

    def pipeline(self, transaction=True, shard_hint=None):
        if transaction:
            return super().pipeline(transaction, shard_hint)
        pipe = WaitingPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.wait_replicas, pipe.owner = self.wait_replicas, self
        return pipe

    def evalsha(self, sha, numkeys, *keys_and_args):
        pipe = self.pipeline(transaction=False)
        pipe.evalsha(sha, numkeys, *keys_and_args)
        return pipe.execute()[0]


class WaitingPipeline(Pipeline):
    wait_replicas = (0, 0)
    owner: WaitingRedis

    def execute(self, raise_on_error: bool = True):
        stack = self.command_stack
        owner = self.owner
        if not any(_writes(args) for args, _ in stack) or owner.no_replica_until > time.monotonic():
            return super().execute(raise_on_error)
        n = len(stack)
        self.execute_command("WAIT", *self.wait_replicas)
        results = super().execute(raise_on_error)
        acked = results[n] if len(results) > n else 0
        if isinstance(acked, int) and acked < self.wait_replicas[0]:
            if owner.no_replica_until <= time.monotonic():
                log.warning("WAIT: %s of %s replica(s) in %s ms; writing without WAIT for %.0fs",
                            acked, *self.wait_replicas, NO_REPLICA_BACKOFF)
            owner.no_replica_until = time.monotonic() + NO_REPLICA_BACKOFF
        return results[:n]
