"""The Redis Cluster client: redis-py's ``RedisCluster`` with what the engine
needs on top (see :class:`Cluster`). connection.py makes one from a
``redis+cluster://`` URL.
"""
from __future__ import annotations

import itertools
import logging
import random
import time

import redis
from redis.cluster import ClusterPipeline, PipelineCommand, RedisCluster
from redis.exceptions import NoScriptError, RedisClusterException

from queueadmin.core.engine.store.replicas import NO_REPLICA_BACKOFF, writes
from queueadmin.core.engine.store.retry import RETRYABLE, ClusterUnavailable

log = logging.getLogger("queueadmin.connection")

TOPOLOGY_ERRORS = ("Redis Cluster cannot be connected", "startup_nodes could not agree",
                   "All slots are not covered")


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
    * ``wait_replicas``: writes wait for replicas, per node (see replicas.py).
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
            if str(exc).startswith(TOPOLOGY_ERRORS):
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
                if writes(c.args):
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
            if str(exc).startswith(TOPOLOGY_ERRORS):
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
