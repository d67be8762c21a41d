"""Writes that wait for replicas: the ``WAIT_REPLICAS`` setting on one server.

``wait_replicas=(n, timeout_ms)`` makes every pipeline that writes and every
script call end with ``WAIT n timeout`` on the connection that carried the
writes, so that an acknowledged item or an accepted submission is on n
replicas before the call returns (see docs/keys.md, "Failover"); single plain
commands are not covered. A server whose WAIT times out short of n replicas
(a promoted replica whose old master is gone) is written to without WAIT for
NO_REPLICA_BACKOFF seconds, then tried again: waiting cannot make a write
safer where no replica exists. The cluster client (cluster.py) does the same
per node.
"""
from __future__ import annotations

import logging
import time

import redis
from redis.client import Pipeline
from redis.commands.cluster import READ_COMMANDS

log = logging.getLogger("queueadmin.connection")

NO_REPLICA_BACKOFF = 10.0  # seconds without WAIT on a node whose WAIT found no replica in time

_NOT_WRITES = ("WAIT", "PING", "XRANGE", "XPENDING", "ZRANGEBYSCORE", "ZMSCORE", "XLEN", "TYPE", "EXISTS", "HSCAN",
               "SSCAN")


def writes(args) -> bool:
    """Whether a queued command (its arguments, name first) may write."""
    name = str(args[0]).upper()
    return name not in READ_COMMANDS and name not in _NOT_WRITES


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
        if not any(writes(args) for args, _ in stack) or owner.no_replica_until > time.monotonic():
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
