"""The typed calls of the scripts of webhook deliveries, slot ``{wh}`` (due
targets, each target's queue of deliveries, the deliveries; keys.Keys'
webhook keys). One method per script, named as the script: the only place
its KEYS and ARGV are spelled and its answer decoded (see request_slot.py
for the shape). The single due set of older versions keeps its scripts
(webhook_add, webhook_claim, webhook_done) for senders still running them.
"""
from __future__ import annotations

from typing import NamedTuple

from queueadmin.core.engine.store.keys import Keys
from queueadmin.core.engine.store.scripts import Scripts
from queueadmin.core.engine.store.trip import Trip


class Taken(NamedTuple):
    """A webhook_take-4 answer: a delivery, this sender's until the deadline."""

    deadline: int  # ms
    delivery: str


class Claim(NamedTuple):
    """A webhook_claim-1 answer (the older due set)."""

    deadline: int  # ms
    deliveries: list[str]


def _taken(raw) -> Taken | None:
    return Taken(int(raw[0]), raw[1]) if raw else None


def _claim(raw) -> Claim:
    return Claim(int(raw[0]), raw[1:])


def _flag(raw) -> bool:
    return raw == 1


class WebhookScripts:
    def __init__(self, scripts: Scripts, keys: Keys):
        self.scripts, self.keys = scripts, keys

    def _target(self, tid: str) -> list[str]:
        """A target's keys, in the order every target script takes them first."""
        k = self.keys
        return [k.webhook_targets, k.webhook_targets_slow, k.webhook_target(tid), k.webhook_target_queue(tid)]

    def webhook_queue(self, did: str, rid: str, tid: str, name: str, keep_ms: int, fields: list,
                      trip: Trip | None = None):
        """webhook_queue-6: a delivery made once, in its target's queue
        (`fields`: request, url, signer, body and their values) -> whether it was new."""
        k = self.keys
        return self.scripts.run(trip, "webhook_queue", [*self._target(tid), k.webhook(did), k.webhooks_of(rid)],
                                [did, keep_ms, tid, name, *fields], _flag)

    def webhook_take(self, tid: str, lease_ms: int, trip: Trip | None = None):
        """webhook_take-4: a due target's earliest due delivery -> Taken, or
        None (taken by another sender, or nothing due)."""
        return self.scripts.run(trip, "webhook_take", self._target(tid), [tid, lease_ms], _taken)

    def webhook_sent(self, did: str, rid: str, tid: str, *, deadline: int, attempt: str, state: str, next_at_ms: int,
                     keep_ms: int, log_max: int, news: str, penalty_ms: tuple[int, int], trip: Trip | None = None):
        """webhook_sent-6: log one attempt (JSON), schedule the next or close
        the delivery, place its target again -> the attempt's number, 0 when
        the claim ran out."""
        k = self.keys
        return self.scripts.run(trip, "webhook_sent", [*self._target(tid), k.webhook(did), k.webhooks_of(rid)],
                                [did, deadline, attempt, state, next_at_ms, keep_ms, log_max, tid, news,
                                 penalty_ms[0], penalty_ms[1]], int)

    def webhook_adopt(self, did: str, tid: str, name: str, keep_ms: int, trip: Trip | None = None):
        """webhook_adopt-6: a delivery of the older due set moved into its
        target's queue -> whether it moved."""
        k = self.keys
        return self.scripts.run(trip, "webhook_adopt", [k.webhooks_due, *self._target(tid), k.webhook(did)],
                                [did, tid, name, keep_ms], int)

    def webhook_add(self, did: str, rid: str, keep_ms: int, fields: list, trip: Trip | None = None):
        """webhook_add-3 (the older due set): a delivery made once -> whether it was new."""
        k = self.keys
        return self.scripts.run(trip, "webhook_add", [k.webhooks_due, k.webhook(did), k.webhooks_of(rid)],
                                [did, keep_ms, *fields], _flag)

    def webhook_claim(self, lease_ms: int, count: int, trip: Trip | None = None):
        """webhook_claim-1 (the older due set): due deliveries, this caller's until the deadline -> Claim."""
        return self.scripts.run(trip, "webhook_claim", [self.keys.webhooks_due], [lease_ms, count], _claim)

    def webhook_done(self, did: str, rid: str, *, deadline: int, attempt: str, state: str, next_at_ms: int,
                     keep_ms: int, log_max: int, trip: Trip | None = None):
        """webhook_done-3 (the older due set): log one attempt, schedule the
        next or close -> the attempt's number, 0 when the claim ran out."""
        k = self.keys
        return self.scripts.run(trip, "webhook_done", [k.webhooks_due, k.webhook(did), k.webhooks_of(rid)],
                                [did, deadline, attempt, state, next_at_ms, keep_ms, log_max], int)
