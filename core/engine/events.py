"""Named events of a request's life, and what hangs on them.

The code that sees something happen fires its event; the features that care
subscribe. So the worker's reporter does not know about chains, and
`QueueClient.cancel` does not know about webhooks (Dramatiq lists its hooks
once the same way: dramatiq/middleware/middleware.py). No Django here: the
engine fires these with or without it.

    event      fired by (the one place)              payload     subscribers
    FINISHED   the worker's reporter thread,         Finished    chains (follow-ups); in worker
               runtime/reporter.py: a batch of                   processes run through Django, the
               requests that ended through their                 history and webhook deliveries
               items (completed, failed, expired)                (subscribed by core/launch.py)
    CANCELLED  QueueClient.cancel,                   Cancelled   chains (a follow-up on failure),
               client/steering.py                                webhook deliveries (webhook_store)
    ITEM_DEAD  a worker that judged an item dead     ItemDead    none built in
               (its last attempt failed),
               runtime/outcomes.py
    PERIODIC_FIRED  features/periodic.fire, once a   PeriodicFired  none built in (Sentry's cron
               due time's request exists, before                 check-ins: integrations/sentry.py)
               it is enqueued

The engine's own subscribers are listed in BUILT_IN (dotted paths, resolved
on the first fire, so that this module imports none of them) and run first,
in that order; others `subscribe`. Every subscriber runs even when one
fails; the first failure is then raised to the code that fired (later ones
are logged).
"""
from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable

log = logging.getLogger("queueadmin.events")

FINISHED = "finished"
CANCELLED = "cancelled"
ITEM_DEAD = "item dead"
PERIODIC_FIRED = "periodic fired"
EVENTS = (FINISHED, CANCELLED, ITEM_DEAD, PERIODIC_FIRED)

BUILT_IN = {
    FINISHED: ("queueadmin.core.engine.features.chains.on_finished",),
    CANCELLED: ("queueadmin.core.engine.features.chains.on_cancelled",
                "queueadmin.core.engine.features.webhook_store.on_cancelled"),
    ITEM_DEAD: (),
    PERIODIC_FIRED: (),
}


# -- payloads -----------------------------------------------------------------------


class Finished:
    """A batch of requests that ended through their items. `statuses` (their
    final status dicts) is read from Redis once, by the first subscriber
    that asks."""

    def __init__(self, client, rids: list[str]):
        self.client, self.rids = client, rids

    @functools.cached_property
    def statuses(self) -> list[dict]:
        return self.client.finished_statuses(self.rids)


@dataclass
class Cancelled:
    """A request just cancelled; `meta` is its meta hash as read before."""
    client: Any
    rid: str
    meta: dict

    @functools.cached_property
    def status(self) -> dict | None:
        return self.client.status(self.rid)


@dataclass(frozen=True)
class ItemDead:
    """An item whose last attempt failed: it goes to the dead letters with its
    outcome's next round trip."""
    queue: str
    rid: str
    entry: str
    index: int
    attempt: int
    error: str


@dataclass(frozen=True)
class PeriodicFired:
    """A periodic request's due time fired (features/periodic.py): `definition`
    is its Definition, `rid` the request made for `due_ms`; `manual` when run
    now apart from the schedule, `missed` when it stands for missed times."""
    client: Any
    definition: Any
    due_ms: int
    rid: str
    manual: bool = False
    missed: bool = False


# -- the registry --------------------------------------------------------------------

_lock = threading.Lock()
_subscribers: dict[str, list[Callable]] = {event: [] for event in EVENTS}  # replaced, never changed in place
_built_in: dict[str, list[Callable]] | None = None


def subscribe(event: str, fn: Callable[[Any], None]) -> None:
    """Call `fn(payload)` whenever `event` fires (once, however often it is subscribed)."""
    with _lock:
        if fn not in _known(event):
            _subscribers[event] = [*_subscribers[event], fn]


def unsubscribe(event: str, fn: Callable[[Any], None]) -> None:
    with _lock:
        _subscribers[event] = [f for f in _known(event) if f != fn]


def subscribers(event: str) -> list[Callable]:
    """Who hears `event`, in order: the built-in ones, then the subscribed."""
    global _built_in
    if _built_in is None:  # two threads may both resolve it: the same functions
        _built_in = {e: [_resolve(path) for path in paths] for e, paths in BUILT_IN.items()}
    return [*_built_in[event], *_known(event)]


def fire(event: str, payload) -> None:
    """Tell every subscriber of `event`; then raise the first failure, if any."""
    call_all(subscribers(event), payload, event)


def call_all(fns, payload, event: str = "") -> None:
    """Call each of `fns` with `payload`, whatever the others do; then raise
    the first failure (the others are logged)."""
    first = None
    for fn in fns:
        try:
            fn(payload)
        except Exception as exc:
            if first is None:
                first = exc
            else:
                log.exception("%s: %s failed too", event or "event", getattr(fn, "__qualname__", fn))
    if first is not None:
        raise first


def _known(event: str) -> list[Callable]:
    try:
        return _subscribers[event]
    except KeyError:
        raise ValueError(f"unknown event {event!r} (known: {', '.join(EVENTS)})") from None


def _resolve(path: str) -> Callable:
    module, _, name = path.rpartition(".")
    return getattr(import_module(module), name)
