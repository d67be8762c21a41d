"""The queue engine (no Django here), by role:

    store/     Redis: clients from a URL (connection), every key (keys), the
               Lua scripts with one typed call each (queue_slot,
               request_slot, periodic_slot, webhook_slot), round trips (trip)
    client/    the producer and operator API: QueueClient (submission,
               reads, steering), input limits, de-duplication
    runtime/   the worker: its loop (worker) and the collaborators it is
               made of (claims, cycle, keeping, handoff, routing, outcomes,
               executor, leases, watchdog, registry, upkeep, reporter, pool)
    features/  chains, periodic requests, the long-term schedule, rate
               limits, the webhook store, statistics
    config, errors, events, states: queue settings, errors, named events of
               a request's life, a request's states

This module is the engine's door: what a caller uses is named here.

    from queueadmin.core.engine import QueueClient, QueueConfig, Worker, connect, QueueError

The names are resolved on first use: importing a small part of the engine
(its settings, its errors) must not import redis-py (about 115 ms) or the
worker's runtime (about 160 ms in all), which a command or a web process
that never runs a worker would pay at every start.
"""
from __future__ import annotations

from importlib import import_module

_NAMES = {
    "QueueClient": "queueadmin.core.engine.client.queue_client",
    "Submission": "queueadmin.core.engine.client.submission",
    "QueueConfig": "queueadmin.core.engine.config",
    "QueueError": "queueadmin.core.engine.errors",
    "ScriptError": "queueadmin.core.engine.store.scripts",
    "RETRYABLE": "queueadmin.core.engine.store.connection",
    "connect": "queueadmin.core.engine.store.connection",
    "Worker": "queueadmin.core.engine.runtime.worker",
    "Processors": "queueadmin.core.engine.runtime.processors",
    "TERMINAL": "queueadmin.core.engine.states",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str):
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)  # on first use, for a fast start (see the docstring)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_NAMES))
