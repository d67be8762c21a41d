"""A worker's tokens between round trips: given back with the next one, or
kept for the next item of their request when nothing else waits.

The token model gives a token back after each item, so that requests of one
priority take turns and a higher priority goes first. When no token waits in
the queue at the token's priority or above (the worker looks at the best
waiting token in every dispatch round trip), giving it back and claiming it
again would only cost a round trip: no one else is owed the turn. So a
worker running fast items keeps such a token for a short window
(KEEP_WINDOW since it left the queue) and takes the request's next item with
it in the same round trip that acknowledges the last one.

What keeps the semantics: a kept token still stands for one item in flight
(concurrency); `take` hands nothing out for a kept token whose request
changed priority, lowered its concurrency below the token or has its own rate
limit (TakeKind.RETURN: the token goes back); a queue with a rate limit
(its own, or one for its groups: features/groups.py), a paused queue and a
worker that is leaving keep nothing; and the window bounds how long a token newly waiting at the same or a higher priority waits for one
kept before it (about one batch of fast items, BATCH_WINDOW).

`Keeping` owns every token the worker is done with until a round trip
(cycle.py) carries it: its `releases` per queue (token, mode, until; the
ARGV tail of cycle-18), its kept tokens, and the tokens of one-item
requests that wait for their acknowledgement's answer.
"""
from __future__ import annotations

import time

from queueadmin.core.engine.runtime.item import Item
from queueadmin.core.engine.runtime.pace import BATCH_WINDOW, Pace
from queueadmin.core.engine.store import Store
from queueadmin.core.engine.store.keys import MAX_PRIORITY, PRIORITY_BAND
from queueadmin.core.engine.store.packed import LANE_P
from queueadmin.core.engine.store.trip import Answer, Trip

KEEP_WINDOW = BATCH_WINDOW  # seconds a token may be kept since it was claimed from the queue


class Keeping:
    def __init__(self, store: Store, pace: Pace, queues: list[str]):
        self.store, self.keys, self.pace = store, store.keys, pace
        self.releases: dict[str, list] = {q: [] for q in queues}  # queue -> token, mode, until (cycle-18's ARGV)
        self.kept: dict[str, list[Item]] = {}  # queue -> acknowledged items whose tokens are kept
        self.deferred: list[Item] = []  # one-item requests' items whose token waits for their ack's answer
        self._capped: dict[str, float] = {}  # queue -> until when its claims need not be tried again
        self._best_waiting: dict[str, int] = {}  # queue -> priority of its best waiting token (-1: none)
        self._open = True  # False once the worker stops taking work: nothing is kept any more

    def close(self) -> None:
        """The worker stops taking work: from now on every token goes back."""
        self._open = False

    def give_back(self, queue: str, token: str, mode: str = "return", until: int = 0) -> None:
        """With the next round trip: `return` the token to the queue, `park`
        it until `until` (ms), or `drop` it."""
        self.releases[queue] += [token, mode, until]

    def pending(self) -> bool:
        """Whether tokens wait for a round trip."""
        return bool(self.kept) or any(self.releases.values())

    def release(self, item: Item, outcome: str) -> None:
        """After an outcome: keep the item's token for its request's next item,
        or give it back with the next round trip. A one-item request's token
        waits for its acknowledgement's answer (`after_acks`), unless it is
        to retry (the request goes on)."""
        if item.lean and outcome != "retry":
            self.deferred.append(item)
            return
        if self._may_keep(item, outcome):
            self.kept.setdefault(item.queue, []).append(item)
        else:
            self.releases[item.queue] += [item.token, "return", 0]

    def _may_keep(self, item: Item, outcome: str) -> bool:
        return (not item.lean and outcome != "cancelled" and item.stop_reason is None
                and time.monotonic() - item.claimed < KEEP_WINDOW
                and self._best_waiting.get(item.queue, MAX_PRIORITY) < item.priority
                and self._open and self.pace.fast(item.queue))

    # -- in a round trip (cycle.py) ---------------------------------------------

    def put_kept(self, trip: Trip, queue: str, go_on: bool) -> "KeptTakes":
        """Takes for the tokens kept in `queue` (when `go_on`, within their
        window) on the round trip; every other kept token is given back with
        it."""
        now, groups = time.monotonic(), {}
        for q, items in self.kept.items():
            for item in items:
                if go_on and q == queue and now - item.claimed < KEEP_WINDOW:
                    groups.setdefault(item.rid, []).append(item)
                else:
                    self.releases[q] += [item.token, "return", 0]
        self.kept = {}
        takes = []
        if groups:
            terms = self.pace.terms(queue)
            for rid, items in groups.items():
                top = max(int(i.token.rpartition("#")[2]) for i in items)
                takes.append((rid, items, self.store.request.take(rid, terms, len(items), f"{top}|{items[0].priority}",
                                                                  trip=trip)))
        return KeptTakes(takes)

    def sent(self, queues: list[str]) -> list[Item]:
        """The round trip carried the releases of `queues` and the
        acknowledgements of the deferred items: those are done; returns the
        deferred items, for `after_acks`."""
        for q in queues:
            self.releases[q] = []
        deferred, self.deferred = self.deferred, []
        return deferred

    def after_acks(self, acked: list[Item], closed: list[str], finishing) -> None:
        """Release the tokens of one-item requests once their acknowledgement
        answered: dropped when it closed the request (retired in the next round
        trip: its id in `finishing`), else given back; nothing to do for those
        `ack_lean` closed and retired (`closed`). Given back at once, the token
        of a finished request would wait in the queue until it is retired, and
        wake an idle worker to claim it for nothing."""
        retired = set(closed)
        for item in acked:
            if item.rid not in retired:
                mode = "drop" if item.rid in finishing else "return"
                self.releases[item.queue] += [item.token, mode, 0]

    def put_best_waiting(self, trip: Trip, queue: str) -> tuple[Answer, Answer, Answer]:
        """Read, in the round trip, what `note_best_waiting` needs."""
        qk = self.keys.queue(queue)
        trip.pipe.zrange(qk.tokens, 0, 0, withscores=True)
        best = trip.answer()
        trip.pipe.hmget(qk.config, "paused", "rate_spec", "group_rate_spec", "group_rates")
        config = trip.answer()
        trip.pipe.llen(qk.lane)
        return best, config, trip.answer()

    def note_best_waiting(self, queue: str, answers: tuple[Answer, Answer, Answer]) -> None:
        """The priority of the best token waiting in `queue` (-1: none), or
        of the lane's requests (LANE_P) when that is better, as read in the
        last round trip; a paused queue or one with a rate limit (its starts
        are counted at claims), the queue's or a group's (features/groups.py),
        keeps nothing."""
        best, config, lane = (a.value for a in answers)
        if config[0] == "1" or any(config[1:]):
            self._best_waiting[queue] = MAX_PRIORITY
        else:
            token = MAX_PRIORITY - int(best[0][1]) // PRIORITY_BAND if best else -1
            self._best_waiting[queue] = max(token, LANE_P if lane else -1)

    def note_claim(self, queue: str, want: int, got: int) -> None:
        """A claim that got fewer tokens than it asked for (the queue is empty
        or the fair share reached): while kept tokens go on, in their window,
        round trips need not claim again (`kept_only`)."""
        if want and got < want:
            self._capped[queue] = time.monotonic() + KEEP_WINDOW
        else:
            self._capped.pop(queue, None)

    def kept_only(self, queue: str) -> bool:
        """Whether the next round trip only takes for kept tokens (no claim)."""
        kept, now = self.kept.get(queue), time.monotonic()
        return bool(kept) and now < self._capped.get(queue, 0) and all(now - i.claimed < KEEP_WINDOW for i in kept)

    def kept_count(self, queue: str) -> int:
        return len(self.kept.get(queue, ()))


class KeptTakes:
    """The `take` calls of a round trip for kept tokens: (request id, kept
    items, Answer) each."""

    __slots__ = ("takes",)

    def __init__(self, takes: list):
        self.takes = takes

    def answers(self) -> tuple[list[tuple[str, list[str]]], list, dict[str, float]]:
        """(request id, tokens) per take, its Took, and when each kept token
        first came out of the queue (for `Claims.took`)."""
        takes = [(rid, [i.token for i in items]) for rid, items, _ in self.takes]
        claimed = {i.token: i.claimed for _, items, _ in self.takes for i in items}
        return takes, [answer.value for _, _, answer in self.takes], claimed
