"""One dispatch round trip of a worker, `cycle-18` at its heart: one
pipeline that carries everything the worker has to tell Redis and claims
what it can run next.

Its sections, in the order they go on the pipeline (Redis runs them in it):

    untakes      items this worker cannot run, back untouched, before their
                 tokens go back (Routing.put_untakes)
    rest out     it woke: no more handoffs (Handoffs.put_rest_out)
    retires      requests that finished (Outcomes.put_retires)
    acks         outcomes: one `ack` per request, one `ack_lean` per queue
                 (Outcomes.put_acks)
    kept takes   the next items for the tokens kept in the claimed queue
                 (Keeping.put_kept); other kept tokens are given back
    claims       per queue with releases (and the claimed queue): the
                 releases and a claim of up to `want` tokens (cycle-18)
    hint take    the one-item request whose wake marker woke the worker,
                 taken if the claim gets its token (take_lean)
    best waiting what keeping needs to know (Keeping.put_best_waiting)
    figures      throughput and metrics (Outcomes.put_figures)

Each section keeps what its calls returned (Answers, trip.py) and reads them
once the trip ran: no one counts positions in the pipeline's answers. If
the trip fails (Redis trouble), nothing it carried counts as sent and the
next round trip carries it again.
"""
from __future__ import annotations

import time

from queueadmin.core.engine.runtime.item import Item
from queueadmin.core.engine.store.trip import Trip


class Cycle:
    def __init__(self, claims, queue: str, want: int | None, go_on: bool = False):
        """`claims`: the worker's Claims (claims.py), whose collaborators the
        sections are. `want`: the most tokens of `queue` to claim (None: no
        look at `queue` at all, unless it has releases). `go_on`: kept tokens
        of `queue` take their next items (else every kept token goes back)."""
        self.claims, self.queue, self.want, self.go_on = claims, queue, want, go_on

    def run(self) -> tuple[list[str], list[Item]]:
        """Send the round trip; returns the tokens claimed in `queue` (not
        yet taken) and the items taken (for kept tokens, and a hinted one)."""
        c, queue, go_on = self.claims, self.queue, self.go_on
        trip = c.store.trip()
        untaken = c.routing.put_untakes(trip)
        resting = c.handoffs.put_rest_out(trip)
        retired = c.outcomes.put_retires(trip)
        acks = c.outcomes.put_acks(trip)
        kept = c.keeping.put_kept(trip, queue, go_on)
        cycled = [q for q in c.queues if (q == queue and self.want is not None) or c.keeping.releases[q]]
        figures = c.outcomes.figures_now(idle=self.want == 0 and not go_on)
        want = self.want or 0
        claims = {q: self._put_claim(trip, q, want if q == queue else 0) for q in cycled}
        hint = c.hints.pop(queue, None) if want and queue in claims else None
        hinted = c.store.queue.take_lean(queue, c.pace.terms(queue), [(hint, f"{hint}#1")], trip=trip) if hint else None
        best = c.keeping.put_best_waiting(trip, queue) if queue in claims and c.pace.fast(queue) else None
        if figures:
            c.outcomes.put_figures(trip)
        trip.run()

        c.routing.untaken(untaken)
        c.handoffs.rested(resting)
        claimed_at = time.monotonic()
        c.outcomes.sent(figures)
        deferred = c.keeping.sent(cycled)
        closed = c.outcomes.acknowledged(acks)  # requests the round trip closed and retired (ack_lean)
        c.keeping.after_acks(deferred, closed, c.outcomes.finishing)
        if retired or closed:
            c.reporter.put(retired + closed)
        if best:
            c.keeping.note_best_waiting(queue, best)
        items = c.took(queue, *kept.answers())
        if queue not in claims:
            return [], items
        tokens = c.claimed(queue, want, claims[queue].value, claimed_at)
        if hint and f"{hint}#1" in tokens:  # claimed, and taken already
            tokens.remove(f"{hint}#1")
            items += c.took(queue, [(hint, [f"{hint}#1"])], hinted.value)
        return tokens, items

    def _put_claim(self, trip: Trip, queue: str, want: int):
        c = self.claims
        return c.store.queue.cycle(queue, c.id, c.pace.config(queue).lease_ms, want, aging=c.aging,
                                   live_workers=c.live_workers, least_share=c.pace.least_share(queue),
                                   lacks=c.routing.lacks(queue), releases=c.keeping.releases[queue], trip=trip)
