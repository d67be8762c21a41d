"""Items a worker cannot run go to a worker that can (abilities.py has the
shared part: what workers say they can run, marks, orphans).

The common case costs nothing here: every worker can run everything, its
claims name no processor it lacks ("", cycle-18 reads nothing more) and
each take answer costs one set lookup.

When a take hands this worker items whose processor it cannot load (not in
its settings, a task whose module it cannot import), `unrunnable` keeps
them from the executor: with the next round trip, and before their tokens
go back in it, each item is given back untouched (untake-3: its delivery
count as before the take, due at once) and its request is marked in the
queue's `needs` hash. From then on the worker names the processor in its
claims, which pass over that request's tokens where they wait: workers that
have the processor claim them in priority order, and this one goes on with
what it can run. Every semantic stays: the tokens never leave the queue's
structures (concurrency limits, leases and crash recovery are as before),
nothing is dead-lettered or counted, and a handoff is made only for a
worker that says it can run the processor (submit_one-21, `can` hash).
A claim that got nothing but passed over such tokens mutes the queue's wake
markers for this worker for MUTE seconds, so that it neither takes the
markers meant for workers that can run them nor wakes for each of them.

When no live worker of the queue can run the processor for longer than the
queue's `unrunnable_seconds` (`review`, in upkeep), this worker stops
passing over those requests and fails their items with that reason instead:
a failed attempt like any other, retried after the backoff, then a dead
letter.

`Routing` owns that state of a worker: the items to give back with the
next round trip (`put_untakes`), the processors no live worker has had for
too long, the queues whose markers it does not wait on for now, and what it
last said it can run.
"""
from __future__ import annotations

import logging
import time

from queueadmin.core.engine.runtime import abilities
from queueadmin.core.engine.runtime.abilities import Abilities
from queueadmin.core.engine.runtime.item import Held, Item, Ran
from queueadmin.core.engine.runtime.keeping import Keeping
from queueadmin.core.engine.runtime.pace import Pace
from queueadmin.core.engine.runtime.registry import Registry
from queueadmin.core.engine.store.trip import Trip
from queueadmin.core.engine.store import packed

log = logging.getLogger("queueadmin.worker")

MUTE = 0.25  # seconds a worker does not wake for a queue's markers when only work it cannot run waits there
REVIEW_EVERY = 1.0  # seconds between reviews of the work no live worker can run (abilities.review)
NO_WORKER = "NoWorker: no live worker has processor {processor!r} (none for more than {seconds:g}s)"


class Routing:
    def __init__(self, client, abilities: Abilities, registry: Registry, pace: Pace, keeping: Keeping, held: Held,
                 on_done, worker_id: str, queues: list[str]):
        self.client, self.redis, self.keys, self.store = client, client.redis, client.keys, client.store
        self.abilities, self.registry, self.pace, self.keeping, self.held = abilities, registry, pace, keeping, held
        self.on_done, self.id, self.queues = on_done, worker_id, queues
        self._untakes: dict[str, tuple[str, str, list]] = {}  # request id -> (queue, processor, entry/attempt pairs)
        self._expired: dict[str, frozenset[str]] = {}  # queue -> processors no live worker has had for too long
        self._muted: dict[str, float] = {}  # queue -> until when its wake markers are not waited on
        self._told: set[str] = set()  # processors whose lack was logged
        self._review_due = 0.0
        self._can_published = ""

    def unrunnable(self, queue: str, processor: str, items: list[Item]) -> None:
        """Items just taken whose processor this worker cannot load: back
        untouched with the next round trip, or failed if no live worker has
        had it for longer than the queue allows."""
        if processor in self._expired.get(queue, ()):
            seconds = self.pace.config(queue).unrunnable_seconds
            for item in items:
                item.stop_reason = "unrunnable"  # no run time to count, no token to keep
                self.held.add(item)
            self.on_done([Ran(i, error=NO_WORKER.format(processor=processor, seconds=seconds)) for i in items])
            return
        if processor not in self._told:
            self._told.add(processor)
            log.warning("worker %s cannot run processor %r (%s): its items are left to workers that can",
                        self.id, processor, self.abilities.why(processor))
        fields = self._untakes.setdefault(items[0].rid, (queue, processor, []))[2]
        for item in items:
            fields += [item.entry, item.attempt]
            self.keeping.give_back(queue, item.token)

    def put_untakes(self, trip: Trip) -> list[str]:
        """Items given back and their requests' marks, first in a round trip
        (before the cycle that returns their tokens). Returns the requests."""
        rids = list(self._untakes)
        for rid in rids:
            queue, processor, fields = self._untakes[rid]
            self.store.request.untake(rid, self.id, fields, trip=trip)
            abilities.mark(trip.pipe, self.keys.queue(queue), rid, processor)
        return rids

    def untaken(self, rids: list[str]) -> None:
        """The round trip gave those requests' items back."""
        for rid in rids:
            self._untakes.pop(rid, None)

    def lacks(self, queue: str) -> str:
        """What the claim passes over: the processors this worker lacks, less
        those whose items it now fails (no live worker has them for too long)."""
        if not self.abilities.lacks:
            return ""
        expired = self._expired.get(queue, ())
        return abilities.joined(sorted(p for p in self.abilities.lacks if p not in expired))

    def note_wait(self, queue: str, wait_ms: int) -> None:
        """A claim's wait: -1 (only work this worker cannot run waits) mutes the queue's markers for a while."""
        if wait_ms < 0:
            self._muted[queue] = time.monotonic() + MUTE
        else:
            self._muted.pop(queue, None)

    def awake(self, now: float) -> list[str]:
        """The queues whose wake markers this worker waits on now."""
        if not self._muted:
            return self.queues
        return [q for q in self.queues if self._muted.get(q, 0.0) <= now]

    def wake_by(self, now: float) -> list[float]:
        """When the muted queues' markers are waited on again (those still muted)."""
        return [t for t in self._muted.values() if t > now]

    # -- upkeep -----------------------------------------------------------------

    def review(self) -> None:
        """Say what this worker can run (for handoffs), and bring the orphans
        of its queues up to date: which processors no live worker has had for
        longer than the queue allows."""
        now = time.monotonic()
        if now < self._review_due:
            return
        self._review_due = now + REVIEW_EVERY
        self.abilities.retry_stale()
        self.publish_can()
        pipe = self.redis.pipeline(transaction=False)
        for q in self.queues:
            qk = self.keys.queue(q)
            pipe.hlen(qk.needs)
            pipe.hlen(qk.orphans)
        counts = pipe.execute()
        marked = [q for n, q in enumerate(self.queues) if counts[2 * n] or counts[2 * n + 1]]
        expired, workers, now_ms = {}, None, abilities.now_ms()
        for q in marked:
            # one worker a second reviews a queue (it reads every worker's hash); the others read its result
            if self.redis.set(self.keys.queue(q).reviewed, self.id, nx=True, px=int(REVIEW_EVERY * 1000)):
                workers = self.registry.workers() if workers is None else workers
                orphaned = abilities.review(self.client, q, workers)
            else:
                orphaned = abilities.orphans(self.client, q)
            limit_ms = self.pace.config(q).unrunnable_seconds * 1000
            expired[q] = frozenset(p for p, since in orphaned.items() if now_ms - since >= limit_ms)
        self._expired = expired

    def publish_can(self) -> None:
        """This worker's names in its queues' `can` hashes, when they changed."""
        text = abilities.joined([*self.abilities.names(), *packed.WORKER_MARKS])  # it reads packed requests
        if text == self._can_published:
            return
        pipe = self.redis.pipeline(transaction=False)
        for q in self.queues:
            pipe.hset(self.keys.queue(q).can, self.id, text)
        pipe.execute()
        self._can_published = text

    def unpublish_can(self) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for q in self.queues:
            pipe.hdel(self.keys.queue(q).can, self.id)
        pipe.execute()

    def passes(self) -> dict[str, set[str]]:
        """Queue -> the processors a claim passes over there (for `drained`)."""
        return {q: set(abilities.split(arg)) for q in self.queues if (arg := self.lacks(q))}
