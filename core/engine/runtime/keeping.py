"""Keeping a token for the next item of its request, when nothing else waits.

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
limit (kind 5: the token goes back); a queue with a rate limit, a paused
queue and a worker that is leaving keep nothing; and the window bounds how
long a token newly waiting at the same or a higher priority waits for one
kept before it (about one batch of fast items, BATCH_WINDOW).

A mixin of `Worker` (worker.py), which owns the state it uses.
"""
from __future__ import annotations

import time

from queueadmin.core.engine.runtime.claims import BATCH_WINDOW
from queueadmin.core.engine.runtime.item import Item
from queueadmin.core.engine.store.keys import MAX_PRIORITY, PRIORITY_BAND

KEEP_WINDOW = BATCH_WINDOW  # seconds a token may be kept since it was claimed from the queue


class Keeping:
    def _release_token(self, item: Item, outcome: str) -> None:
        """After an outcome: keep the item's token for its request's next item,
        or give it back with the next round trip. A one-item request's token
        waits for its acknowledgement's answer (`_after_acks`), unless it is
        to retry (the request goes on)."""
        if item.lean and outcome != "retry":
            self._deferred.append(item)
            return
        if self._may_keep(item, outcome):
            self._kept.setdefault(item.queue, []).append(item)
        else:
            self._releases[item.queue] += [item.token, "return", 0]

    def _may_keep(self, item: Item, outcome: str) -> bool:
        return (not item.lean and outcome != "cancelled" and item.stop_reason is None
                and time.monotonic() - item.claimed < KEEP_WINDOW
                and self._best_waiting.get(item.queue, MAX_PRIORITY) < item.priority
                and not self._stop.is_set() and not self._leaving and self._fast(item.queue))

    def _after_acks(self, acked: list[Item], closed: list[str]) -> None:
        """Release the tokens of one-item requests once their acknowledgement
        answered: dropped when it closed the request (retired in the next round
        trip), else given back; nothing to do for those `ack_lean` closed and
        retired (`closed`). Given back at once, the token of a finished
        request would wait in the queue until it is retired, and wake an idle
        worker to claim it for nothing."""
        retired = set(closed)
        for item in acked:
            if item.rid not in retired:
                mode = "drop" if item.rid in self._finishing else "return"
                self._releases[item.queue] += [item.token, mode, 0]

    def _pipe_kept(self, pipe, queue: str, go_on: bool) -> list[tuple[str, list[Item]]]:
        """Takes for the tokens kept in `queue` (when `go_on`, within their
        window) on the round trip's pipeline; every other kept token is given
        back with it. Returns the takes as (request id, kept items)."""
        now, groups = time.monotonic(), {}
        for q, items in self._kept.items():
            for item in items:
                if go_on and q == queue and now - item.claimed < KEEP_WINDOW:
                    groups.setdefault(item.rid, []).append(item)
                else:
                    self._releases[q] += [item.token, "return", 0]
        self._kept = {}
        if groups:
            cfg = self.config(queue)
            for rid, items in groups.items():
                top = max(int(i.token.rpartition("#")[2]) for i in items)
                self.scripts.pipe(pipe, "take", self.keys.request(rid).all(),
                                  [self.id, cfg.lease_ms, cfg.max_attempts, cfg.retention_ms, self.client.channel,
                                   len(items), f"{top}|{items[0].priority}"])
        return list(groups.items())

    def _pipe_best_waiting(self, pipe, queue: str) -> None:
        """Read, in the round trip, what `_note_best_waiting` needs."""
        qk = self.keys.queue(queue)
        pipe.zrange(qk.tokens, 0, 0, withscores=True)
        pipe.hmget(qk.config, "paused", "rate_spec")

    def _note_best_waiting(self, queue: str, best, config) -> None:
        """The priority of the best token waiting in `queue` (-1: none), as
        read in the last round trip; a paused queue or one with a rate limit
        (its starts are counted at claims) keeps nothing."""
        if config[0] == "1" or config[1]:
            self._best_waiting[queue] = MAX_PRIORITY
        else:
            self._best_waiting[queue] = MAX_PRIORITY - int(best[0][1]) // PRIORITY_BAND if best else -1

    def _note_claim(self, queue: str, want: int, got: int) -> None:
        """A claim that got fewer tokens than it asked for (the queue is empty
        or the fair share reached): while kept tokens go on, in their window,
        round trips need not claim again (`_kept_only`)."""
        if want and got < want:
            self._capped[queue] = time.monotonic() + KEEP_WINDOW
        else:
            self._capped.pop(queue, None)

    def _kept_only(self, queue: str) -> bool:
        """Whether the next round trip only takes for kept tokens (no claim)."""
        kept, now = self._kept.get(queue), time.monotonic()
        return bool(kept) and now < self._capped.get(queue, 0) and all(now - i.claimed < KEEP_WINDOW for i in kept)

    def _kept_count(self, queue: str) -> int:
        return len(self._kept.get(queue, ()))
