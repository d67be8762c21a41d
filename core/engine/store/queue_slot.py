"""The typed calls of the scripts that touch a queue's dispatch slot
``{q:NAME}`` (tokens, held tokens and leases, parked tokens, registered
requests, schedule, de-dup index, wake list...; keys.QueueKeys), one-item
requests made in that slot included.

One method per script, named as the script: the only place its KEYS (in
the order of the script's header) and ARGV are spelled, and the only place
its answer is decoded. Each works now (`trip=None`: the decoded answer) or
on a round trip (an Answer, see trip.py); a refusal (a negative code, see
scripts.Code) raises ScriptError.
"""
from __future__ import annotations

import enum
import json
from typing import NamedTuple

from queueadmin.core.engine.store.keys import Keys
from queueadmin.core.engine.store.request_slot import TakeTerms, Took, acked, meta_fields, took
from queueadmin.core.engine.store.scripts import Scripts, refusable
from queueadmin.core.engine.store.trip import Trip


class Claimed(NamedTuple):
    """A cycle-18 answer."""

    wait_ms: int  # 0; the ms until a rate limit that held back the claim frees a start; -1: only
    # tokens of requests whose processor this worker lacks wait (it passed them over)
    tokens: list[str]


class EnqueueCode(enum.IntEnum):
    """What enqueue-9 (and submit_one-21) did with a request."""

    QUEUED = 0
    SCHEDULED = 1
    DUPLICATE = 2  # of a pending or running request: `Enqueued.id` is that one
    REGISTERED = 3  # already registered (an idempotent repeat)


class Enqueued(NamedTuple):
    code: int  # an EnqueueCode
    id: str  # the request's id, or for a DUPLICATE the other request's


def enqueued(raw) -> Enqueued:
    return Enqueued(int(raw[0]), raw[1])


class Ticked(NamedTuple):
    """A tick-12 answer."""

    promoted: list[str]  # scheduled requests now queued
    reaped: int  # tokens whose lease ran out, taken back
    unparked: int
    aged: int


class Adjusted(NamedTuple):
    """An adjust-10 answer: the request's priority and concurrency before."""

    priority: int
    concurrency: int


class Handoff(NamedTuple):
    """A handoff on a wake list (submit_one-21): a one-item request whose
    token was claimed, and item taken, for a resting worker."""

    worker: str  # the worker it was made for
    rid: str
    took: Took | None  # the take's answer (None: it found nothing to run)
    rested: str  # when that worker's rest began (ms; "" from an older version)

    @classmethod
    def parse(cls, value: str) -> "Handoff":
        wid, rid, answer, *rested = json.loads(value)  # rested: absent in a handoff of an older version
        return cls(wid, rid, took(answer), rested[0] if rested else "")


class Moved(enum.IntEnum):
    """What sched_move-2 did with one request."""

    NOT_REGISTERED = 0  # finished, cancelled, or not yet enqueued
    MOVED = 1  # (or already there): drop it from its shard
    NOT_SCHEDULED = 2  # queued or running: drop it from its shard


def _flag(raw) -> bool:
    return raw == 1


def _rested(raw) -> list[Handoff]:
    return [Handoff.parse(value) for value in raw] if isinstance(raw, list) else []


_adjusted = refusable("adjust", lambda raw: Adjusted(int(raw[0]), int(raw[1])))
_unparked = refusable("unpark", int)
_cancelled = refusable("cancel_one", int)


class QueueScripts:
    def __init__(self, scripts: Scripts, keys: Keys):
        self.scripts, self.keys = scripts, keys
        self._cycle_keys: dict[str, list[str]] = {}  # queue -> cycle-18's keys (every round trip)
        self._one_keys: dict[str, list[str]] = {}  # queue -> submit_one-21's keys after the request's

    def cycle(self, queue: str, worker: str, lease_ms: int, want: int, *, aging: bool, live_workers: int,
              least_share: int, lacks: str, releases: list, trip: Trip | None = None):
        """cycle-18: one dispatch round trip's claim of up to `want` tokens,
        after the `releases` (in threes: token, return | park | drop, until
        ms) -> Claimed. `lacks`: the processors this worker cannot run, each
        between newlines ("" for none)."""
        keys = self._cycle_keys.get(queue)
        if keys is None:
            qk = self.keys.queue(queue)
            keys = self._cycle_keys[queue] = [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked, qk.wake,
                                              qk.config, qk.lastserved, qk.rate, qk.ratelog, qk.needs,
                                              qk.groups, qk.glimits, qk.gheld, qk.packed, qk.lane, qk.tomb]
        return self.scripts.run(trip, "cycle", keys, [worker, lease_ms, want, 1 if aging else 0,
                                                      f"{live_workers}/{least_share}", lacks, *releases], _claimed)

    def tick(self, queue: str, batch: int, aging_ms: int, trip: Trip | None = None):
        """tick-12: promote due scheduled requests, reap ran-out token leases,
        wake parked tokens, age waiting requests -> Ticked."""
        qk = self.keys.queue(queue)
        return self.scripts.run(trip, "tick", [qk.sched, qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked,
                                               qk.wake, qk.lastserved, qk.packed, qk.lane, qk.tomb],
                                [batch, aging_ms], _ticked)

    def retire(self, queue: str, rid: str, dedup_key: str = "", trip: Trip | None = None, *, laned: bool = False):
        """retire-13: a finished request out of its queue's dispatch -> whether
        it was registered. `laned`: cancel-5 found it waiting unindexed (it
        answered 2), so it may wait in the queue's lane."""
        return self.scripts.run(trip, "retire", self._retire_keys(queue), [rid, dedup_key or "", "1" if laned else ""],
                                _flag)

    def cancel_one(self, queue: str, rid: str, retention_ms: int, channel: str, trip: Trip | None = None):
        """cancel_one-18: cancel a request of the queue's slot and retire it,
        in one call -> cancel-5's answer; NOT_FOUND or FINISHED refuse."""
        return self.scripts.run(trip, "cancel_one", [*self.keys.request(rid).all(), *self._retire_keys(queue)],
                                [retention_ms, channel, rid], _cancelled)

    def _retire_keys(self, queue: str) -> list[str]:
        qk = self.keys.queue(queue)
        return [qk.tokens, qk.reqs, qk.held, qk.leases, qk.parked, qk.dedup, qk.sched, qk.index, qk.lastserved,
                qk.rate, qk.packed, qk.lane, qk.tomb]

    def enqueue(self, queue: str, rid: str, *, priority: int, concurrency: int, dedup_key: str, delay_ms: int,
                tokens: int, far: bool, rate_spec: str, group: str = "", trip: Trip | None = None):
        """enqueue-9: register a created request (its tokens, or its
        schedule when delayed; `far`: its time is in a schedule shard;
        `group`: its group, "" for none) -> Enqueued."""
        qk = self.keys.queue(queue)
        return self.scripts.run(trip, "enqueue", [qk.tokens, qk.seq, qk.reqs, qk.wake, qk.dedup, qk.sched, qk.index,
                                                  qk.rate, qk.groups],
                                [rid, priority, concurrency, dedup_key, delay_ms, tokens, 1 if far else 0, rate_spec,
                                 group or ""],
                                enqueued)

    def submit_one(self, queue: str, rid: str, meta: dict, payload: str, *, priority: int, concurrency: int,
                   dedup_key: str, delay_ms: int, expires_ms: int, rate_spec: str, lease_ms: int, max_attempts: int,
                   retention_ms: int, channel: str, packed: bool = True, lane: bool = False,
                   compact: bool = False, trip: Trip | None = None):
        """submit_one-21: create and register a one-item request in the
        queue's slot (or hand it to a resting worker; never one of a group,
        meta field `group`) -> Enqueued; EXISTS refuses. `packed`: it may
        wait packed (store/packed.py); else its meta carries its id, which
        asks the script for the full lean layout. `lane`: it may wait in the
        queue's lane (every worker of the queue reads lanes); `compact`
        besides: waiting unindexed, its meta may be compact (they read that)."""
        keys = self._one_keys.get(queue)
        if keys is None:  # the queue's part of the keys, made once
            qk = self.keys.queue(queue)
            keys = self._one_keys[queue] = [qk.tokens, qk.seq, qk.reqs, qk.wake, qk.dedup, qk.sched, qk.index,
                                            qk.rate, qk.held, qk.leases, qk.config, qk.idle, qk.can, qk.groups,
                                            qk.packed, qk.lane]
        return self.scripts.run(trip, "submit_one", [*self.keys.request(rid).all(), *keys],
                                [rid, priority, concurrency, dedup_key, delay_ms, expires_ms, 0, rate_spec, lease_ms,
                                 max_attempts, retention_ms, channel, *meta_fields(meta, packed=packed), payload,
                                 ("2" if compact else "1") if lane else ""],
                                _submitted)

    def adjust(self, queue: str, rid: str, *, priority: int | None = None, concurrency: int | None = None,
               trip: Trip | None = None):
        """adjust-10: a live request's new priority and/or concurrency ->
        Adjusted (the old ones); NOT_FOUND (not registered) refuses."""
        qk = self.keys.queue(queue)
        meta = self.keys.request(rid).meta if self.keys.in_queue_slot(rid) else qk.lane  # not read: see adjust-10
        return self.scripts.run(trip, "adjust", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.parked, qk.wake, qk.packed,
                                                 qk.lane, qk.tomb, meta],
                                [rid, "" if priority is None else priority, "" if concurrency is None else concurrency],
                                _adjusted)

    def unpark(self, queue: str, rid: str, trip: Trip | None = None):
        """unpark-6: wake the request's parked tokens -> how many; NOT_FOUND
        (not registered) refuses."""
        qk = self.keys.queue(queue)
        return self.scripts.run(trip, "unpark", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.parked, qk.wake], [rid],
                                _unparked)

    def release_worker(self, queue: str, worker: str, trip: Trip | None = None):
        """release_worker-7: every token `worker` holds in the queue given
        back -> the ids of their requests."""
        qk = self.keys.queue(queue)
        return self.scripts.run(trip, "release_worker", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked,
                                                         qk.wake], [worker], list)

    def extend_token(self, queue: str, token: str, worker: str, ms: int, trip: Trip | None = None):
        """extend_token-2: the token's lease `ms` from now -> False when this
        worker no longer holds it (NOT_HELD)."""
        qk = self.keys.queue(queue)
        return self.scripts.run(trip, "extend_token", [qk.held, qk.leases], [token, worker, ms], _flag)

    def rest(self, queue: str, worker: str, into: bool, trip: Trip | None = None):
        """rest-2: `worker` rests on the queue (`into`) or stops resting ->
        the handoffs made for it and still on the wake list (none going in)."""
        qk = self.keys.queue(queue)
        return self.scripts.run(trip, "rest", [qk.idle, qk.wake], [worker, "in" if into else "out"], _rested)

    def adopt(self, queue: str, rid: str, *, made_for: str, worker: str, lease_ms: int, rested: str,
              trip: Trip | None = None):
        """adopt-5: take over a handoff popped by a worker it was not made
        for -> whether this worker now holds it (run nothing otherwise)."""
        qk, rk = self.keys.queue(queue), self.keys.request(rid)
        return self.scripts.run(trip, "adopt", [qk.held, qk.leases, rk.items, rk.leases, qk.idle],
                                [f"{rid}#1", made_for, worker, lease_ms, rested], _flag)

    def take_lean(self, queue: str, terms: TakeTerms, tokens: list[tuple[str, str]], trip: Trip | None = None):
        """take_lean-1+5n: the items of one-item requests of the queue's slot,
        (request id, token) each -> one Took (or None) per request, in order."""
        keys = [self.keys.queue(queue).held]
        for rid, _ in tokens:
            keys += self.keys.request(rid).all()
        return self.scripts.run(trip, "take_lean", keys, [*terms, *(token for _, token in tokens)], _took_many)

    def ack_lean(self, queue: str, worker: str, retention_ms: int, channel: str, acks: list[tuple[str, list]],
                 trip: Trip | None = None):
        """ack_lean-11+5n: the outcomes of one-item requests of the queue's
        slot, (request id, outcomes in sixes as ack-5's) each; retires those
        it closes -> one Acked per request, in order."""
        qk = self.keys.queue(queue)
        keys = [qk.tokens, qk.reqs, qk.held, qk.leases, qk.parked, qk.dedup, qk.sched, qk.index, qk.lastserved,
                qk.rate, qk.packed]
        args = [worker, retention_ms, channel]
        for rid, outcomes in acks:
            keys += self.keys.request(rid).all()
            args += [rid, len(outcomes) // 6, *outcomes]
        return self.scripts.run(trip, "ack_lean", keys, args, _acked_many)

    def sched_move(self, queue: str, ready: list[tuple[str, int]], trip: Trip | None = None):
        """sched_move-2: requests of a schedule shard due soon into the
        queue's `sched`, (request id, ready ms) each -> a Moved per request."""
        qk = self.keys.queue(queue)
        return self.scripts.run(trip, "sched_move", [qk.reqs, qk.sched], [x for pair in ready for x in pair],
                                _moved)


def _claimed(raw) -> Claimed:
    return Claimed(int(raw[0]), raw[1:])


def _ticked(raw) -> Ticked:
    return Ticked(raw[0], int(raw[1]), int(raw[2]), int(raw[3]))


_submitted = refusable("submit_one", enqueued)


def _took_many(raw) -> list[Took | None]:
    return [took(answer) for answer in raw]


def _acked_many(raw) -> list:
    return [acked(answer) for answer in raw]


def _moved(raw) -> list[Moved]:
    return [Moved(int(code)) for code in raw]
