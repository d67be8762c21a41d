"""Handoffs: a one-item request submitted while a worker is idle goes to that
worker with its item, in one hop, as in a plain list queue.

An idle worker *rests* on each of its queues (rest-2 "in": a queue-slot
ZSET of worker id -> when the rest began) just before it blocks on the wake
lists, for at most REST_MAX (an older rest is a dead worker's).
`submit_one` finds the worker that has rested longest among those that say
they can run the request's processor (routing.py) and, when nothing may
go first (the queue is not paused and has no rate limit, the
request has no delay or rate limit of its own, and no token of its priority
or better waits), claims the token and takes the item for it in the same
script, and pushes the take's answer onto the wake list instead of a
marker. Redis hands a pushed value to the client blocked longest, which is
that worker as a rule: it runs the item with no round trip of its own. From
submit to start that is one round trip less than a wake marker, which the
worker answers with a claim.

What keeps the semantics: the token is held and the item leased as by a
claim, so a worker that dies with it loses nothing (its lease, or the
recovery of a dead worker, brings it back; release_worker also removes the
handoffs made for it). A worker that pops a handoff made for another takes
it over first (adopt-5), and runs nothing unless the other still held it;
the other gets its rest back as it began, so that the next handoff is made
for the worker Redis will serve. One that cannot run the item's processor
gives it back untouched, as any item it cannot run (routing.py).
A worker that woke for something else stops resting in its next round trip
(rest-2 "out"), which also returns any handoff made for it meanwhile that
no one popped: it holds those, so it runs them (or, leaving, hands them
back).

`Handoffs` owns that state of a worker: the queues it rests on, and the
handoffs it holds and has not started yet (the dispatcher starts them first,
claims.py).
"""
from __future__ import annotations

from queueadmin.core.engine.runtime.pace import Pace
from queueadmin.core.engine.store import Store
from queueadmin.core.engine.store.queue_slot import Handoff
from queueadmin.core.engine.store.request_slot import Took
from queueadmin.core.engine.store.trip import Answer, Trip

REST_MAX = 1.5  # seconds a worker blocks at rest at most: less than REST_MS (_common.lua), after which a rest
# counts as a dead worker's


class Handoffs:
    def __init__(self, store: Store, pace: Pace, worker_id: str):
        self.store, self.pace, self.id = store, pace, worker_id
        self.resting: list[str] = []  # the queues it rests on: handoffs may come
        self._handed: list[tuple[str, str, Took | None]] = []  # (queue, request id, take) of handoffs to start

    def rest(self, queues: list[str]) -> None:
        """Rest on `queues` for the coming block on their wake lists."""
        trip = self.store.trip()
        for q in queues:
            self.store.queue.rest(q, self.id, True, trip=trip)
        trip.run()
        self.resting = list(queues)

    def put_rest_out(self, trip: Trip) -> list[tuple[str, Answer]]:
        """Stop resting, in a round trip: (queue, Answer) per queue, whose
        answer is the handoffs made for this worker and not popped."""
        queues, self.resting = self.resting, []
        return [(q, self.store.queue.rest(q, self.id, False, trip=trip)) for q in queues]

    def rested(self, answers: list[tuple[str, Answer]]) -> None:
        """The handoffs found as it stopped resting are its own to run."""
        for q, answer in answers:
            for handoff in answer.value:
                self._handed.append((q, handoff.rid, handoff.took))

    def popped(self, queue: str, value: str) -> None:
        """A handoff popped from `queue`'s wake list: this worker's to run,
        once taken over if it was made for another."""
        handoff = Handoff.parse(value)
        if handoff.worker != self.id and not self._adopt(queue, handoff):
            return
        self._handed.append((queue, handoff.rid, handoff.took))

    def _adopt(self, queue: str, handoff: Handoff) -> bool:
        if handoff.took is None:  # the take found nothing: nothing to run
            return False
        return self.store.queue.adopt(queue, handoff.rid, made_for=handoff.worker, worker=self.id,
                                      lease_ms=self.pace.config(queue).lease_ms, rested=handoff.rested)

    def handed(self) -> list[tuple[str, str, Took | None]]:
        """The handoffs held, to start (or hand back): (queue, request id,
        take) each; they are the caller's now."""
        handed, self._handed = self._handed, []
        return handed

    def __bool__(self) -> bool:
        return bool(self._handed)

    def leave(self) -> None:
        """Leaving: stop resting (the handoffs that came meanwhile join the held ones)."""
        if self.resting:
            trip = self.store.trip()
            answers = self.put_rest_out(trip)
            trip.run()
            self.rested(answers)
