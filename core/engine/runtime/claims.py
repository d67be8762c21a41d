"""How a worker claims work: one dispatch round trip (cycle.py) returns
finished tokens, acknowledges outcomes and claims up to N tokens; `take`
then takes one item per token. How many tokens to claim depends on the free
slots of the executor and on the queue's items (pace.py). Handoffs
(handoff.py) start first, with no round trip of their own.

`Claims` owns what only claiming needs: the one-item requests whose wake
marker woke the worker (taken in the round trip that claims their token),
when a rate limit frees a start in a queue it could not claim from, when
the last claim came back, and how many workers share the tokens.
"""
from __future__ import annotations

import json
import time

import redis

from queueadmin.core.engine.hooks import HOOKS
from queueadmin.core.engine.runtime.abilities import Abilities
from queueadmin.core.engine.runtime.cycle import Cycle
from queueadmin.core.engine.runtime.handoff import Handoffs
from queueadmin.core.engine.runtime.item import Held, Item
from queueadmin.core.engine.runtime.keeping import Keeping
from queueadmin.core.engine.runtime.outcomes import Outcomes
from queueadmin.core.engine.runtime.pace import Pace
from queueadmin.core.engine.runtime.routing import Routing
from queueadmin.core.engine.runtime.upkeep import PARK_IDLE_MS
from queueadmin.core.engine.store import Store
from queueadmin.core.engine.store.queue_slot import Claimed
from queueadmin.core.engine.store.request_slot import TakeKind, Took

_PARK, _PARK_STREAM, _FINISHED, _RETURN = TakeKind.PARK, TakeKind.PARK_STREAM, TakeKind.FINISHED, TakeKind.RETURN


class Claims:
    def __init__(self, store: Store, pace: Pace, executor, keeping: Keeping, outcomes: Outcomes, routing: Routing,
                 handoffs: Handoffs, held: Held, abilities: Abilities, upkeep, reporter, worker_id: str,
                 queues: list[str], aging: bool):
        self.store, self.keys, self.pace, self.executor = store, store.keys, pace, executor
        self.keeping, self.outcomes, self.routing, self.handoffs = keeping, outcomes, routing, handoffs
        self.held, self.abilities, self.upkeep, self.reporter = held, abilities, upkeep, reporter
        self.id, self.queues, self.aging = worker_id, queues, aging
        self.hints: dict[str, str] = {}  # queue -> a one-item request whose wake marker woke this worker
        self.live_workers = 1  # for a fair share of tokens per claim; refreshed by upkeep
        self._throttled: dict[str, float] = {}  # queue -> when a rate limit that held back claims frees a start
        self._claimed_at = time.monotonic()  # when the last claim's round trip came back

    def claim_and_start(self) -> bool:
        """Claim tokens (queues in order) until some yield items, and start
        them; False when nothing could be claimed. Kept tokens (keeping.py)
        take their next items in the same round trip; handoffs (handoff.py)
        start first, with none."""
        if self.handoffs and self.start_handed():
            return True
        for queue in self.queues:
            for _ in range(20):
                want, kept = self.pace.want(queue, self.executor), self.keeping.kept_count(queue)
                if want <= 0 and not kept:
                    break
                claim = None if self.keeping.kept_only(queue) else max(0, want - kept)
                tokens, items = self.cycle(queue, claim, go_on=True)
                if tokens:
                    items += self.take(queue, tokens)
                if items:
                    fast = self.pace.fast(queue)
                    self.executor.submit(items, fast, inline=fast and not self.executor.busy())
                    return True
                if not tokens:
                    break
        if self.outcomes.pending(counts=True) or self.keeping.pending():
            self.flush()  # acknowledge, retire and count what finished before waiting
        return False

    def cycle(self, queue: str, want: int | None, go_on: bool = False) -> tuple[list[str], list[Item]]:
        """One round trip (cycle.py): the tokens claimed in `queue`, and the items taken with them."""
        return Cycle(self, queue, want, go_on).run()

    def flush(self) -> None:
        """A round trip that claims nothing: outcomes and tokens go out (kept tokens go back)."""
        self.cycle(self.queues[0], 0)

    def pending(self) -> bool:
        """Whether a round trip has something to carry (figures aside)."""
        return self.outcomes.pending() or self.keeping.pending()

    def hint(self, queue: str, rid: str) -> None:
        """A one-item request's id woke the worker: take it in the round trip that claims its token."""
        self.hints[queue] = rid

    def throttled_until(self) -> list[float]:
        """When rate limits that held back claims free a start (monotonic)."""
        return list(self._throttled.values())

    def claimed(self, queue: str, want: int, claimed: Claimed, at: float) -> list[str]:
        """A claim's answer, read in its round trip: the tokens it got."""
        tokens = claimed.tokens
        self.keeping.note_claim(queue, want, len(tokens))
        if want:
            self.routing.note_wait(queue, claimed.wait_ms)  # -1: only work it cannot run waits (routing.py)
        if claimed.wait_ms > 0 and not tokens:  # held back by a rate limit: look again when a start frees
            self._throttled[queue] = time.monotonic() + claimed.wait_ms / 1000
        else:
            self._throttled.pop(queue, None)
        self._claimed_at = at
        return tokens

    def take(self, queue: str, tokens: list[str]) -> list[Item]:
        """Take one item per token (one script call per request); tokens left
        without an item are parked or dropped at the next round trip."""
        terms = self.pace.terms(queue)
        by_rid: dict[str, list[str]] = {}
        for token in tokens:
            by_rid.setdefault(token.rpartition("#")[0], []).append(token)
        in_slot = self.keys.in_queue_slot
        lean = [(rid, toks) for rid, toks in by_rid.items() if len(toks) == 1 and in_slot(rid)]
        takes = [(rid, toks) for rid, toks in by_rid.items() if len(toks) > 1 or not in_slot(rid)]
        trip = self.store.trip()
        answers = [self.store.request.take(rid, terms, len(toks), trip=trip) for rid, toks in takes]
        if lean:  # one-item requests in the queue's slot: one call for all
            lean_answer = self.store.queue.take_lean(queue, terms, [(rid, toks[0]) for rid, toks in lean], trip=trip)
        trip.run()
        got = [answer.value for answer in answers] + (lean_answer.value if lean else [])
        order = {t: i for i, t in enumerate(tokens)}
        items = self.took(queue, takes + lean, got)
        items.sort(key=lambda item: order[item.token])  # claim order: priority, then round-robin
        return items

    def took(self, queue: str, takes: list[tuple[str, list[str]]], answers: list[Took | None],
             claimed: dict[str, float] | None = None) -> list[Item]:
        """Items from take answers, one per (request id, tokens); each token
        left without an item gets its release. `claimed`: when kept tokens
        first came out of the queue (others: the last claim)."""
        cfg = self.pace.config(queue)
        items = []
        for (rid, toks), got in zip(takes, answers):
            if got is None:  # NOT_FOUND: created a moment ago elsewhere, or long gone
                later = int(time.time() * 1000) + 1000
                for t in toks:
                    self.keeping.give_back(queue, t, "park", later)
                self.upkeep.retire_if_stale(queue, rid)
                continue
            processor = got.processor
            limit = float(got.time_limit) if got.time_limit != "" else cfg.time_limit_seconds
            given = []
            for n, (entry, index, payload, attempt) in enumerate(got.items()):
                token = toks[n]
                at = claimed.get(token, self._claimed_at) if claimed else self._claimed_at
                given.append(Item(queue, token, rid, entry, int(index), payload, int(attempt), processor, limit=limit,
                                  priority=got.priority, lean=got.lean, claimed=at, worker=self.id))
            if given and not self.abilities.can_run(processor):
                self.routing.unrunnable(queue, processor, given)  # back untouched, for a worker that can
            elif given:
                items += given
                self.pace.took_async(queue, self.executor.is_async(processor))
            kind = got.kind
            if kind == _FINISHED:
                self.outcomes.finished(queue, rid, got.dedup_key)
            for t in toks[len(given):]:
                if kind == _PARK:  # in flight elsewhere or waiting to retry: come back then
                    self.keeping.give_back(queue, t, "park", got.wake_at)
                elif kind == _PARK_STREAM:  # streamed request waiting for items: `add` wakes it (or a
                    # minute passes, in case the producer died between adding and waking)
                    self.keeping.give_back(queue, t, "park", int(time.time() * 1000) + PARK_IDLE_MS)
                elif kind == _RETURN:  # a kept token that may not go on (keeping.py)
                    self.keeping.give_back(queue, t, "return", 0)
                else:
                    self.keeping.give_back(queue, t, "drop", 0)
        for item in items:
            self.held.add(item)
        if HOOKS.wants_headers and items:
            self._read_headers(items)
        return items

    def _read_headers(self, items: list[Item]) -> None:
        """Each item's request headers (hooks.py), in one round trip; only
        when an installed hook wants them."""
        rids = list({item.rid for item in items})
        pipe = self.store.redis.pipeline(transaction=False)
        for rid in rids:
            pipe.hget(self.keys.request(rid).meta, "headers")
        try:
            found = dict(zip(rids, pipe.execute()))
        except redis.RedisError:  # the items are held already: they run, untraced, rather than get stranded
            found = {}
        for item in items:
            item.headers = _headers(found.get(item.rid))

    def handed_items(self) -> dict[str, list[Item]]:
        """The items of the handoffs this worker holds, by queue (`took`
        gives the releases of tokens left without an item)."""
        by_queue: dict[str, list[Item]] = {}
        now = time.monotonic()
        for queue, rid, took in self.handoffs.handed():
            token = f"{rid}#1"
            by_queue.setdefault(queue, []).extend(self.took(queue, [(rid, [token])], [took], claimed={token: now}))
        return by_queue

    def start_handed(self) -> bool:
        started = False
        for queue, items in self.handed_items().items():
            if items:
                fast = self.pace.fast(queue)
                self.executor.submit(items, fast, inline=fast and not self.executor.busy())
                started = True
        return started


def _headers(text: str | None) -> dict:
    try:
        headers = json.loads(text) if text else {}
    except ValueError:
        return {}
    return headers if isinstance(headers, dict) else {}
