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

A mixin of `Worker` (worker.py), which owns the state it uses.
"""
from __future__ import annotations

import json
import time

import redis

from queueadmin.core.engine.runtime.item import Item

REST_MAX = 1.5  # seconds a worker blocks at rest at most: less than REST_MS (_common.lua), after which a rest
# counts as a dead worker's


class Handoffs:
    def _rest(self, queues: list[str]) -> None:
        """Rest on `queues` for the coming block on their wake lists."""
        pipe = self.redis.pipeline(transaction=False)
        for q in queues:
            qk = self.keys.queue(q)
            self.scripts.pipe(pipe, "rest", [qk.idle, qk.wake], [self.id, "in"])
        self.scripts.execute(pipe)
        self._resting = list(queues)

    def _pipe_rest_out(self, pipe) -> list[str]:
        """Stop resting, in a round trip's pipeline: the queues, in the order
        of their answers (handoffs made for this worker and not popped)."""
        queues, self._resting = self._resting, []
        for q in queues:
            qk = self.keys.queue(q)
            self.scripts.pipe(pipe, "rest", [qk.idle, qk.wake], [self.id, "out"])
        return queues

    def _rested(self, queues: list[str], answers: list) -> None:
        for q, handoffs in zip(queues, answers):
            for value in handoffs:
                _, rid, took, *_ = json.loads(value)
                self._handed.append((q, rid, took))

    def _popped(self, queue: str, value: str) -> None:
        """A handoff popped from `queue`'s wake list: this worker's to run,
        once taken over if it was made for another."""
        wid, rid, took, *rested = json.loads(value)  # rested: absent in a handoff of an older version
        if wid != self.id and not self._adopt(queue, rid, wid, took, rested[0] if rested else ""):
            return
        self._handed.append((queue, rid, took))

    def _adopt(self, queue: str, rid: str, wid: str, took, rested) -> bool:
        if isinstance(took, int):  # the take found nothing: nothing to run
            return False
        qk, rk = self.keys.queue(queue), self.keys.request(rid)
        return self.scripts("adopt", [qk.held, qk.leases, rk.items, rk.leases, qk.idle],
                            [f"{rid}#1", wid, self.id, self.config(queue).lease_ms, rested]) == 1

    def _handed_items(self) -> dict[str, list[Item]]:
        """The items of the handoffs this worker holds, by queue (`_took`
        gives the releases of tokens left without an item)."""
        by_queue: dict[str, list[Item]] = {}
        handed, self._handed = self._handed, []
        now = time.monotonic()
        for queue, rid, took in handed:
            token = f"{rid}#1"
            items = self._took(queue, [(rid, [token])], [took], claimed={token: now})
            by_queue.setdefault(queue, []).extend(items)
        return by_queue

    def _start_handed(self) -> bool:
        started = False
        for queue, items in self._handed_items().items():
            if items:
                fast = self._fast(queue)
                self.executor.submit(items, fast, inline=fast and not self.executor.busy())
                started = True
        return started

    def _hand_back(self) -> None:
        """Leaving: stop resting, and hand back the handoffs that came meanwhile."""
        try:
            if self._resting:
                pipe = self.redis.pipeline(transaction=False)
                queues = self._pipe_rest_out(pipe)
                self._rested(queues, self.scripts.execute(pipe))
            items = [i for group in self._handed_items().values() for i in group]
            if items:
                self._abandon(items)
        except redis.RedisError:
            pass  # their leases bring them back
