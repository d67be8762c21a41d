"""The typed calls of the scripts that touch one request's slot ``{r:ID}``
(its meta hash, items, leases, results and dead letters; keys.RequestKeys).

One method per script, named as the script: the only place its KEYS (in
the order of the script's header) and ARGV are spelled, and the only place
its answer is decoded. Each works now (`trip=None`: the decoded answer) or
on a round trip (an Answer, see trip.py); a refusal (a negative code, see
scripts.Code) raises ScriptError, except where a method says what it
returns instead.
"""
from __future__ import annotations

import enum
from typing import Iterator, NamedTuple

from queueadmin.core.engine.store.keys import Keys
from queueadmin.core.engine.store.scripts import Scripts, refusable
from queueadmin.core.engine.store.trip import Trip


class TakeKind(enum.IntEnum):
    """What a take says about the tokens it left without an item (take-5)."""

    ALL_GIVEN = 0  # none left over
    PARK = 2  # park them until the wake time: items in flight elsewhere or waiting to retry
    PARK_STREAM = 3  # park them until items are added (a streamed request, not finalized)
    FINISHED = 4  # drop them: the request is finished
    RETURN = 5  # give them back to the queue: kept tokens that may not go on (keeping.py)


class Took(NamedTuple):
    """A take-5 answer: the request's settings and up to N items."""

    kind: int  # a TakeKind
    wake_at: int  # ms, for PARK
    processor: str
    dedup_key: str
    time_limit: str  # the request's own, in seconds, or "" for the queue's
    priority: int
    lean: bool  # a request of one item
    flat: list  # entry id, index, payload, attempt, for each item given

    def items(self) -> Iterator[tuple[str, str, str, str]]:
        """(entry id, index, payload, attempt) of each item given, as Redis sent them."""
        flat = self.flat
        return zip(flat[0::4], flat[1::4], flat[2::4], flat[3::4])

    def given(self) -> int:
        return len(self.flat) // 4


def took(raw) -> Took | None:
    """A take-5 answer; None for NOT_FOUND (no such request) and, in a
    take_lean answer, for NOT_HELD (a token this worker does not hold)."""
    if raw.__class__ is int:
        return None
    return Took(int(raw[0]), int(raw[1]), raw[2], raw[3], raw[4], int(raw[5]), raw[6] == 1, raw[7:])


class TakeTerms(NamedTuple):
    """What a take hands items out under: to whom, for how long, and the
    queue's settings it applies (take-5's ARGV[1..5])."""

    worker: str
    lease_ms: int
    max_attempts: int
    retention_ms: int
    channel: str


class Acked(NamedTuple):
    """An ack-5 answer."""

    closed: bool  # the request closed now (these were its last items)
    state: str
    counted: int  # items counted (not acknowledged before)
    dedup_key: str


def acked(raw) -> Acked:
    return Acked(int(raw[0]) == 1, raw[1], raw[2], raw[3])


class Added(NamedTuple):
    total: int  # items of the request so far
    closed: bool  # finalizing closed it (all its items were done)


class Retried(NamedTuple):
    count: int  # dead letters sent back
    reopened: bool  # a failed request reopened (it needs tokens again)


def item_info(raw) -> dict | None:
    """An item-1 answer as {index, payload, consumer, deliveries, idle_ms}, or None."""
    if not raw:
        return None
    return {"index": int(raw[0]), "payload": raw[1], "consumer": raw[2], "deliveries": int(raw[3]),
            "idle_ms": int(raw[4])}


def holders(raw) -> list[dict]:
    """A holders-1 answer as XPENDING's summary lists consumers: [{name, pending}]."""
    return [{"name": raw[i], "pending": int(raw[i + 1])} for i in range(0, len(raw or []), 2)]


def meta_fields(meta: dict, packed: bool = False) -> list:
    """A mapping as the count-prefixed field/value list create-2 and
    submit_one-21 take; `packed` (submit_one) leaves out what the script adds
    when it unpacks the request (store/packed.py): the id, an empty de-dup key."""
    flat = [0]
    for k, v in meta.items():
        if not (packed and (k == "id" or (k == "dedup_key" and not v))):
            flat += [k, v]
    flat[0] = (len(flat) - 1) // 2
    return flat


def _flag(raw) -> bool:
    return raw == 1


_created = refusable("create", int)
_added = refusable("add", lambda raw: Added(int(raw[0]), int(raw[1]) == 1))
_cancelled = refusable("cancel", int)
_discarded = refusable("discard", int)
_retried = refusable("retry", lambda raw: Retried(int(raw[0]), int(raw[1]) == 1))


class RequestScripts:
    def __init__(self, scripts: Scripts, keys: Keys):
        self.scripts, self.keys = scripts, keys

    def create(self, rid: str, meta: dict, payloads: list[str], *, delay_ms: int = 0, expires_ms: int = 0,
               finalized: bool = True, trip: Trip | None = None):
        """create-2: the request's meta hash and its first items -> how many
        were added; EXISTS if a request with this id exists already."""
        rk = self.keys.request(rid)
        return self.scripts.run(trip, "create", [rk.meta, rk.items],
                                [delay_ms, expires_ms, 1 if finalized else 0, *meta_fields(meta), *payloads],
                                _created)

    def add(self, rid: str, payloads: list[str], *, finalize: bool = False, retention_ms: int = 0, channel: str = "",
            trip: Trip | None = None):
        """add-5: items added to a streamed request -> Added; NOT_FOUND,
        FINISHED or FINALIZED refuse."""
        return self.scripts.run(trip, "add", self.keys.request(rid).all(),
                                [1 if finalize else 0, retention_ms, channel, *payloads], _added)

    def take(self, rid: str, terms: TakeTerms, tokens: int, kept: str = "", trip: Trip | None = None):
        """take-5: up to `tokens` items for a worker holding that many of the
        request's tokens -> Took, or None (no such request). `kept`:
        "k|priority" for tokens kept from items just acknowledged (keeping.py)."""
        args = [*terms, tokens, kept] if kept else [*terms, tokens]
        return self.scripts.run(trip, "take", self.keys.request(rid).all(), args, took)

    def ack(self, rid: str, worker: str, retention_ms: int, channel: str, outcomes: list,
            trip: Trip | None = None):
        """ack-5: outcomes of the request's items, in sixes (entry id, index,
        outcome, result record, retry delay ms, attempt line: attempts.py) -> Acked."""
        return self.scripts.run(trip, "ack", self.keys.request(rid).all(),
                                [worker, retention_ms, channel, *outcomes], acked)

    def untake(self, rid: str, worker: str, taken: list, trip: Trip | None = None):
        """untake-3: items given back untouched, in pairs (entry id, the
        attempt the take gave it) -> how many."""
        rk = self.keys.request(rid)
        return self.scripts.run(trip, "untake", [rk.meta, rk.items, rk.leases], [worker, *taken], int)

    def requeue(self, rid: str, entries: list[str] | None = None, worker: str | None = None,
                trip: Trip | None = None):
        """requeue-2: in-flight items due now (the given entries, or every
        item `worker` holds) -> how many."""
        rk = self.keys.request(rid)
        args = ["worker", worker] if worker is not None else ["ids", *(entries or ())]
        return self.scripts.run(trip, "requeue", [rk.items, rk.leases], args, int)

    def extend_item(self, rid: str, entry: str, worker: str, ms: int, trip: Trip | None = None):
        """extend_item-2: the item's lease `ms` from now -> False when this
        worker no longer holds it (NOT_HELD)."""
        rk = self.keys.request(rid)
        return self.scripts.run(trip, "extend_item", [rk.items, rk.leases], [entry, worker, ms], _flag)

    def cancel(self, rid: str, retention_ms: int, channel: str, trip: Trip | None = None):
        """cancel-5: 1, or 2 when it waited unindexed (retire it `laned`);
        NOT_FOUND or FINISHED refuse."""
        return self.scripts.run(trip, "cancel", self.keys.request(rid).all(), [retention_ms, channel], _cancelled)

    def retry(self, rid: str, channel: str, entries: list[str] | None = None, trip: Trip | None = None):
        """retry-5: dead letters back to run (all when no entries) -> Retried;
        NOT_FOUND or FINISHED (cancelled, expired) refuse."""
        return self.scripts.run(trip, "retry", self.keys.request(rid).all(), [channel, *(entries or ())], _retried)

    def discard(self, rid: str, entries: list[str] | None = None, trip: Trip | None = None):
        """discard-5: dead letters dropped (all when no entries) -> how many; NOT_FOUND refuses."""
        return self.scripts.run(trip, "discard", self.keys.request(rid).all(), list(entries or ()), _discarded)

    def promoted(self, rid: str, trip: Trip | None = None):
        """promoted-1: a promoted request marked queued -> whether it was."""
        return self.scripts.run(trip, "promoted", [self.keys.request(rid).meta], [], _flag)

    def item(self, rid: str, entry: str, trip: Trip | None = None):
        """item-1: one item, stream or lean -> {index, payload, consumer,
        deliveries, idle_ms}, or None."""
        return self.scripts.run(trip, "item", [self.keys.request(rid).items], [entry], item_info)

    def holders(self, rid: str, trip: Trip | None = None):
        """holders-1: the workers holding the request's items -> [{name, pending}]."""
        return self.scripts.run(trip, "holders", [self.keys.request(rid).items], [], holders)

    def reseal_field(self, rid: str, where: str, field: str, old: str, new: str, trip: Trip | None = None):
        """reseal_field-1: a field of the request's `results`, `items` or `meta` hash
        set to `new` if it still holds `old` -> True if replaced."""
        key = getattr(self.keys.request(rid), where)
        return self.scripts.run(trip, "reseal_field", [key], [field, old, new], _flag)

    def reseal_stream(self, rid: str, length: int, last: str, pairs: list[str], trip: Trip | None = None):
        """reseal_stream-2: the item stream rebuilt with the payloads of
        `pairs` (entry id, payload, ...) -> True, or False if it changed
        since it was read (`length`, `last` entry id)."""
        items = self.keys.request(rid).items
        return self.scripts.run(trip, "reseal_stream", [items, items + ":rewrap"], [length, last, *pairs], _flag)
