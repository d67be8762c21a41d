"""Chores that any worker (or any process) may run at any time, because each
is one atomic script or idempotent: promote scheduled requests that are due,
take back tokens whose lease ran out, wake parked tokens, age waiting
requests, recover dead workers' work, fire periodic requests that are due,
and tell burst workers when all is done.
"""
from __future__ import annotations

import logging
import time

import redis

from queueadmin.core.engine.features import chains, periodic, schedule
from queueadmin.core.engine.client.queue_client import QueueClient
from queueadmin.core.engine.runtime.registry import Registry

log = logging.getLogger("queueadmin.worker")

PARK_IDLE_MS = 60_000  # a streamed request's idle tokens wait for `add` to wake them, or this long
CHAINS_EVERY = 2.0  # seconds between looks for chained requests left without their follow-up
TICK_BATCH = 500  # scheduled requests / tokens moved per tick and queue


class Upkeep:
    def __init__(self, client: QueueClient, registry: Registry, by: str = "", aging_ms: int = 0):
        self.client, self.registry, self.by, self.aging_ms = client, registry, by, aging_ms
        self.redis, self.keys, self.store = client.redis, client.keys, client.store
        self._next_chains = 0.0
        self._periodic_repair_at = 0.0

    def tick(self, queue: str) -> list[str]:
        """One upkeep pass over a queue's dispatch; returns promoted request ids."""
        schedule.move(self.client, queue)  # far-off requests now near: from their shards to `sched`
        promoted = self.store.queue.tick(queue, TICK_BATCH, self.aging_ms).promoted
        if promoted:
            trip = self.store.trip()
            for rid in promoted:
                self.store.request.promoted(rid, trip=trip)
            trip.run()
        return promoted

    def periodic(self) -> list[tuple[str, int, str]]:
        """Fire the periodic requests that are due (each due time once, whoever
        runs this; core/engine/periodic.py); now and then put back schedules
        missing from the due set."""
        now = time.monotonic()
        if now >= self._periodic_repair_at:
            self._periodic_repair_at = now + periodic.REPAIR_SECONDS
            periodic.repair(self.client)
        return periodic.run(self.client, self.by)

    def sweep_chains(self) -> int:
        """Follow-ups of chained requests whose worker died as they finished
        (chains.py); at most every CHAINS_EVERY seconds."""
        now = time.monotonic()
        if now < self._next_chains:
            return 0
        self._next_chains = now + CHAINS_EVERY
        return chains.sweep(self.client)

    def recover_dead(self) -> int:
        return sum(self.recover(wid) for wid in self.registry.find_dead())

    def recover(self, wid: str) -> int:
        """Give back a dead worker's tokens and make its items due now; the
        first caller to remove it from the registry does the work."""
        if not self.registry.claim_recovery(wid):
            return 0
        n = 0
        for queue in self.registry.queues_of(wid) or self.client.queues():
            for rid in self.store.queue.release_worker(queue, wid):
                try:
                    n += self.store.request.requeue(rid, worker=wid)
                except redis.ResponseError:  # a script's refusal of one request must not leave the rest
                    log.exception("recovering dead worker %s: requeue of request %s", wid, rid)
                self.client.submission.unpark(queue, rid)
            self.redis.hdel(self.keys.queue(queue).can, wid)  # no handoffs for it (routing.py)
        self.registry.mark_dead(wid)
        log.warning("%s recovered dead worker %s: %d item(s) due again", self.by or "upkeep", wid, n)
        return n

    def _passed_over(self, queue: str, lacks: set[str] | None) -> bool:
        """Whether every waiting token of `queue` is of a request marked with
        a processor in `lacks` (a claim passes them all over)."""
        if not lacks:
            return False
        qk = self.keys.queue(queue)
        rids = list({t.rpartition("#")[0] for t in self.redis.zrange(qk.tokens, 0, 999)})
        marks = self.redis.hmget(qk.needs, rids) if rids else []
        return self.redis.zcard(qk.tokens) <= 1000 and all(
            m is not None and m.partition("|")[2] in lacks for m in marks)

    def retire_if_stale(self, queue: str, rid: str) -> None:
        """Tokens of a request that does not exist: give it a minute (its
        creation may be on its way), then remove them."""
        created = self.redis.zscore(self.keys.queue(queue).index, rid)
        if created is None or time.time() * 1000 - created > 60_000:
            self.store.queue.retire(queue, rid, "")

    def drained(self, queues: list[str], passes: dict[str, set[str]] | None = None) -> bool:
        """Nothing to do: no token waiting or held, no scheduled request due
        within a second, and no request with items in flight or waiting to
        retry (parked tokens whose request has no lease). Paused queues and
        streamed requests waiting for items count as nothing to do, and so
        do tokens the worker's claims pass over (`passes`: queue -> the
        processors it lacks, routing.py)."""
        now_ms = time.time() * 1000
        live = [q for q in queues if not self.client.queue_config(q, max_age=2.0).paused]
        pipe = self.redis.pipeline(transaction=False)
        for q in live:
            qk = self.keys.queue(q)
            pipe.zcard(qk.tokens)
            pipe.hlen(qk.held)
            pipe.zcount(qk.sched, "-inf", now_ms + 1000)
            pipe.zrange(qk.parked, 0, -1)
            pipe.llen(qk.lane)  # tombstoned entries too: the next claim drops them
        answers = pipe.execute()
        parked_rids = set()
        for n, q in zip(range(0, len(answers), 5), live):
            tokens, held, due, parked, lane = answers[n:n + 5]
            if held or due or lane or (tokens and not self._passed_over(q, (passes or {}).get(q))):
                return False
            parked_rids.update(t.rpartition("#")[0] for t in parked)
        pipe = self.redis.pipeline(transaction=False)
        for rid in parked_rids:
            pipe.zcard(self.keys.request(rid).leases)
        return not any(pipe.execute())
