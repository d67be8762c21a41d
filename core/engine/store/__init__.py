"""The engine's storage: Redis clients (connection.py, cluster.py,
replicas.py, retry.py), every key (keys.py), the Lua scripts (scripts.py)
and `Store`, the door through which the engine reaches them.

A script is reached through its one typed call, grouped by the hash slot
the script touches: `store.queue` (a queue's dispatch slot,
queue_slot.py), `store.request` (one request's slot, request_slot.py),
`store.periodic`, `store.webhooks` and `store.history`. Each call orders the script's KEYS
and ARGV and decodes its answer into named results; `store.trip()` starts a
round trip on which calls (and plain commands) are queued and answered
together (trip.py).
"""
from __future__ import annotations

from queueadmin.core.engine.store.history_slot import HistoryScripts
from queueadmin.core.engine.store.keys import Keys
from queueadmin.core.engine.store.periodic_slot import PeriodicScripts
from queueadmin.core.engine.store.queue_slot import QueueScripts
from queueadmin.core.engine.store.request_slot import RequestScripts
from queueadmin.core.engine.store.scripts import Code, Scripts, ScriptError
from queueadmin.core.engine.store.trip import Answer, Trip
from queueadmin.core.engine.store.webhook_slot import WebhookScripts


class Store:
    """One Redis client with its keys and scripts (loaded once, here)."""

    def __init__(self, redis, prefix: str = "qa"):
        self.redis = redis
        self.keys = Keys(prefix)
        self.scripts = Scripts(redis)
        self.queue = QueueScripts(self.scripts, self.keys)
        self.request = RequestScripts(self.scripts, self.keys)
        self.periodic = PeriodicScripts(self.scripts, self.keys)
        self.webhooks = WebhookScripts(self.scripts, self.keys)
        self.history = HistoryScripts(self.scripts, self.keys)

    def trip(self) -> Trip:
        """A new round trip (send it with `run`)."""
        return Trip(self.redis, self.scripts)


SLOTS = (QueueScripts, RequestScripts, PeriodicScripts, WebhookScripts, HistoryScripts)  # where the typed calls are

__all__ = ["Store", "Trip", "Answer", "Keys", "Scripts", "ScriptError", "Code", "SLOTS"]
