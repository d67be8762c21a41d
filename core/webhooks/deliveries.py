"""A request's webhook deliveries, Django side: made when a worker process
sees the request finish, and read for the request's page.

`on_finished` hangs on the engine's FINISHED event in worker processes run
through Django (core/launch.py): each finished request that asked for a
webhook gets its delivery at once (durable in Redis,
core/engine/features/webhook_store.py), and this process's sender is woken
to send it. A cancelled request gets its delivery from the engine itself
(webhook_store.on_cancelled); a finish no worker reported is found by the
sender's sweep of watched requests.
"""
from __future__ import annotations

import logging

import redis

from queueadmin.core import clients
from queueadmin.core.engine.client.reads import TERMINAL
from queueadmin.core.engine.features import webhook_store
from queueadmin.core.webhooks import sender

log = logging.getLogger("queueadmin.webhooks")


def on_finished(finished) -> None:
    """events.FINISHED: the deliveries of the batch's requests that asked for one."""
    made = [enqueue_finished(st, finished.client) for st in finished.statuses if st.get("callback_url")]
    if any(made):
        sender.wake()


def enqueue_finished(status: dict, client=None) -> str | None:
    """Make the delivery of a finished request that asked for one
    (idempotent); its id, or None. Redis trouble is logged, not raised."""
    if not status.get("callback_url") or status.get("state") not in TERMINAL:
        return None
    try:
        return webhook_store.enqueue(client or clients.engine(), status)
    except redis.RedisError as exc:
        log.warning("webhook of request %s not queued: %s", status.get("id"), exc)
        return None


def for_request(rid: str) -> list[dict]:
    """A request's deliveries with their attempts, for its page."""
    try:
        return webhook_store.of_request(clients.engine(), rid)
    except redis.RedisError:
        return []
