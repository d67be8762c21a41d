"""The documented door for Python producers in a Django process
(docs/usage.md): ``services.submit(...)`` submits and records the request in
the history, ``services.engine()`` is the engine's client for everything
else. Kept for them: it only re-exports. The code lives in

* core/clients.py: the clients (`engine`, `redis_client`, `reset`);
* core/operations.py: what changes the queue, history kept in step
  (`submit`, `sync_queues`, `dedup_scope`, and the steering operations);
* core/history.py: the request history (`record`, `record_many`).
"""
from queueadmin.core.clients import engine, redis_client, reset
from queueadmin.core.history import PREVIEW_CHARS, db_text, record, record_many
from queueadmin.core.operations import dedup_scope, submit, sync_queues

__all__ = ["engine", "redis_client", "reset", "submit", "sync_queues", "dedup_scope", "record", "record_many",
           "db_text", "PREVIEW_CHARS"]
