"""How a worker claims work: one dispatch round trip (`cycle`) returns
finished tokens, acknowledges outcomes and claims up to N tokens; `take` then
takes one item per token. How many tokens to claim depends on the free slots
of the executor and on the queue's items: fast ones (under FAST_ITEM on
average) in batches worth BATCH_WINDOW of work, slow or async ones as many
as there are free threads or tasks.

A mixin of `Worker` (worker.py), which owns the state it uses.
"""
from __future__ import annotations

import time

from queueadmin.core.engine.features import stats
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.runtime.item import Item
from queueadmin.core.engine.runtime.upkeep import PARK_IDLE_MS

CONFIG_TTL = 2.0  # seconds a queue's settings are cached; admin changes apply this fast
BATCH_WINDOW = 0.005  # seconds of work claimed per round trip for fast items (see batch_size)
FAST_ITEM = 0.001  # items quicker than this on average run in batches on one thread
FAST_JOBS = 2  # batches of fast items in flight at once (one runs while the next is claimed)
MAX_BATCH = 32
LEAST_FAST_SHARE = 4  # tokens a fair share leaves a worker of fast items at least (see cycle-12)
MAX_CLAIM = 64  # tokens claimed per round trip for slow or async items
FIGURES_EVERY = 1.0  # seconds between sends of throughput and metrics figures while busy (a few commands each)


class Claiming:
    def config(self, queue: str) -> QueueConfig:
        now = time.monotonic()
        cached = self._configs.get(queue)
        if cached is None or now - cached[0] > CONFIG_TTL:
            cached = (now, self.client.queue_config(queue))
            self._configs[queue] = cached
        return cached[1]

    def _least_share(self, queue: str) -> int:
        """The fewest tokens the fair share may cap a claim at: a few for fast
        items, so that many workers on one request of a small concurrency
        limit still run batches, not a round trip per item."""
        return LEAST_FAST_SHARE if self._fast(queue) else 1

    def batch_size(self, queue: str) -> int:
        """Tokens to claim at once for fast items: as many as run in BATCH_WINDOW,
        so fast handlers share round trips."""
        avg = self._avg.get(queue)
        if avg is None:
            return 1
        return max(1, min(MAX_BATCH, int(BATCH_WINDOW / max(avg, 1e-6))))

    def _fast(self, queue: str) -> bool:
        avg = self._avg.get(queue)
        return avg is not None and avg < FAST_ITEM and not self._async_queue.get(queue)

    def _want(self, queue: str) -> int:
        """How many tokens of this queue the free slots can run now."""
        ex = self.executor
        if self._async_queue.get(queue):
            return min(MAX_CLAIM, ex.tasks_free())
        if self._fast(queue):
            return self.batch_size(queue) if ex.fast_jobs() < FAST_JOBS and ex.threads_free() > 0 else 0
        return min(MAX_CLAIM, ex.threads_free(), self.batch_size(queue) if queue not in self._avg else MAX_CLAIM)

    def _claim_and_start(self) -> bool:
        """Claim tokens (queues in order) until some yield items, and start
        them; False when nothing could be claimed. Kept tokens (keeping.py)
        take their next items in the same round trip; handoffs (handoff.py)
        start first, with none."""
        if self._handed and self._start_handed():
            return True
        for queue in self.queues:
            for _ in range(20):
                want, kept = self._want(queue), self._kept_count(queue)
                if want <= 0 and not kept:
                    break
                claim = None if self._kept_only(queue) else max(0, want - kept)
                tokens, items = self._cycle(queue, claim, go_on=True)
                if tokens:
                    items += self._take(queue, tokens)
                if items:
                    fast = self._fast(queue)
                    self.executor.submit(items, fast, inline=fast and not self.executor.busy())
                    return True
                if not tokens:
                    break
        if self._acks or self._finishing or self._done or self._kept or any(self._releases.values()):
            self._flush()  # acknowledge, retire and count what finished before waiting
        return False

    def _cycle(self, queue: str, want: int | None, go_on: bool = False) -> tuple[list[str], list[Item]]:
        """One round trip: retire finished requests, pending acknowledgements,
        takes for the tokens kept in `queue` (when `go_on`; any other kept
        token is given back), every queue's token releases, throughput counts,
        and a claim of up to `want` tokens (None: no look at `queue` at all,
        unless it has releases). Returns the tokens claimed and the items the
        kept tokens took."""
        pipe = self.redis.pipeline(transaction=False)
        untaken = self._pipe_untakes(pipe)  # items it cannot run, back before their tokens (routing.py)
        resting = self._pipe_rest_out(pipe)  # woke: no more handoffs (handoff.py)
        retiring = list(self._finishing.items())
        for rid, (q, dedup) in retiring:
            qk = self.keys.queue(q)
            self.scripts.pipe(pipe, "retire", [qk.tokens, qk.reqs, qk.held, qk.leases, qk.parked, qk.dedup, qk.sched,
                                               qk.index, qk.lastserved, qk.rate], [rid, dedup])
        acked = self._pipe_acks(pipe)
        kept = self._pipe_kept(pipe, queue, go_on)
        cycled = [q for q in self.queues if (q == queue and want is not None) or self._releases[q]]
        # figures go out at most once a second, and at once when the worker goes idle (a flush)
        figures = (want == 0 and not go_on) or time.monotonic() >= self._figures_due
        want = want or 0
        for q in cycled:
            qk = self.keys.queue(q)
            self.scripts.pipe(pipe, "cycle", [qk.tokens, qk.seq, qk.reqs, qk.held, qk.leases, qk.parked, qk.wake,
                                              qk.config, qk.lastserved, qk.rate, qk.ratelog, qk.needs],
                              [self.id, self.config(q).lease_ms, want if q == queue else 0,
                               1 if self.aging_ms else 0, f"{self._live_workers}/{self._least_share(q)}",
                               self._lacks_arg(q), *self._releases[q]])
        hint = self._hints.pop(queue, None) if want and queue in cycled else None
        if hint:  # woken for this one-item request: take it in this round trip if the claim gets its token
            self._pipe_take_lean(pipe, queue, [(hint, [f"{hint}#1"])])
        looks = queue in cycled and self._fast(queue)
        if looks:
            self._pipe_best_waiting(pipe, queue)
        if figures:
            self._pipe_figures(pipe)
        results = self.scripts.execute(pipe)[2 * len(untaken):]
        self._untaken(untaken)
        self._rested(resting, results[:len(resting)])
        answers = self._spread_acks(results[len(resting) + len(retiring):], acked)
        after_acks = len(acked) + len(kept)
        kept_answers, answers = answers[len(acked):after_acks], answers[:len(acked)] + answers[after_acks:]
        claimed_at = time.monotonic()
        for item in self._acked:
            self._held.pop(item.token, None)
        deferred = self._deferred  # one-item requests' tokens, released as their acks answered (keeping.py)
        self._acks, self._acked, self._deferred, self._finishing = {}, [], [], {}
        if figures:
            self._done, self._stats, self._figures_due = {}, {}, time.monotonic() + FIGURES_EVERY
        for q in cycled:
            self._releases[q] = []
        closed = []  # requests the round trip closed and retired (ack_lean)
        for (rid, (q, _)), answer in zip(acked, answers):
            if int(answer[0]) == 1:
                if self.keys.in_queue_slot(rid):
                    closed.append(rid)
                else:
                    self._finished(q, rid, answer[3])
        self._after_acks(deferred, closed)
        if retiring or closed:
            self.reporter.put([rid for rid, _ in retiring] + closed)
        at = len(acked) + len(cycled) + (1 if hint else 0)
        if looks:
            self._note_best_waiting(queue, answers[at], answers[at + 1])
        items = self._took(queue, [(rid, [i.token for i in olds]) for rid, olds in kept], kept_answers,
                           claimed={i.token: i.claimed for _, olds in kept for i in olds})
        if queue not in cycled:
            return [], items
        wait_ms, *tokens = answers[len(acked) + cycled.index(queue)]
        self._note_claim(queue, want, len(tokens))
        if want:
            self._note_wait(queue, int(wait_ms))  # -1: only work it cannot run waits (routing.py)
        if int(wait_ms) > 0 and not tokens:  # held back by a rate limit: look again when a start frees
            self._throttled[queue] = time.monotonic() + int(wait_ms) / 1000
        else:
            self._throttled.pop(queue, None)
        self._claimed_at = claimed_at
        if hint and f"{hint}#1" in tokens:  # claimed, and taken already
            tokens.remove(f"{hint}#1")
            items += self._took(queue, [(hint, [f"{hint}#1"])], answers[at - 1])
        return tokens, items

    def _pipe_acks(self, pipe) -> list[tuple[str, tuple[str, list]]]:
        """Outcomes waiting to reach Redis, on the pipeline: one `ack` per
        request, and one `ack_lean` per queue for its one-item requests in
        its slot (which also retires those it closes). Returns the requests
        in the order of their answers once `_spread_acks` has spread them."""
        acked, lean = [], {}
        for rid, (q, fields) in self._acks.items():
            if self.keys.in_queue_slot(rid):
                lean.setdefault(q, []).append((rid, (q, fields)))
                continue
            cfg = self.config(q)
            self.scripts.pipe(pipe, "ack", self.keys.request(rid).all(),
                              [self.id, cfg.retention_ms, self.client.channel, *fields])
            acked.append((rid, (q, fields)))
        self._lean_acks = [len(group) for group in lean.values()]
        for q, group in lean.items():
            qk, cfg = self.keys.queue(q), self.config(q)
            keys = [qk.tokens, qk.reqs, qk.held, qk.leases, qk.parked, qk.dedup, qk.sched, qk.index, qk.lastserved,
                    qk.rate]
            args = [self.id, cfg.retention_ms, self.client.channel]
            for rid, (_, fields) in group:
                keys += self.keys.request(rid).all()
                args += [rid, len(fields) // 5, *fields]
            self.scripts.pipe(pipe, "ack_lean", keys, args)
            acked += group
        return acked

    def _spread_acks(self, answers: list, acked: list) -> list:
        """`answers` with each ack_lean answer (a list, one per request)
        spread out, so there is one answer per request of `acked`."""
        plain = len(acked) - sum(self._lean_acks)
        calls = plain + len(self._lean_acks)
        return answers[:plain] + [a for group in answers[plain:calls] for a in group] + answers[calls:]

    def _pipe_figures(self, pipe) -> None:
        """Throughput per minute (the dashboard's) and counters and histograms
        (/metrics) for what finished since they were last sent."""
        minute = int(time.time() // 60)
        for q, (done, failed) in self._done.items():
            tp = self.keys.throughput(q, minute)
            pipe.hincrby(tp, "done", done)
            pipe.hincrby(tp, "failed", failed)
            pipe.expire(tp, 3600)
        for q, batch in self._stats.items():
            stats.record(pipe, self.keys, q, **batch)

    def _flush(self) -> None:
        self._cycle(self.queues[0], 0)  # kept tokens go back

    def _take(self, queue: str, tokens: list[str]) -> list[Item]:
        """Take one item per token (one script call per request); tokens left
        without an item are parked or dropped at the next round trip."""
        cfg = self.config(queue)
        by_rid: dict[str, list[str]] = {}
        for token in tokens:
            by_rid.setdefault(token.rpartition("#")[0], []).append(token)
        pipe = self.redis.pipeline(transaction=False)
        args = [self.id, cfg.lease_ms, cfg.max_attempts, cfg.retention_ms, self.client.channel]
        lean = [(rid, toks) for rid, toks in by_rid.items() if len(toks) == 1 and self.keys.in_queue_slot(rid)]
        takes = [(rid, toks) for rid, toks in by_rid.items() if len(toks) > 1 or not self.keys.in_queue_slot(rid)]
        for rid, toks in takes:
            self.scripts.pipe(pipe, "take", self.keys.request(rid).all(), [*args, len(toks)])
        if lean:  # one-item requests in the queue's slot: one call for all
            self._pipe_take_lean(pipe, queue, lean)
        answers = self.scripts.execute(pipe)
        if lean:
            answers = answers[:-1] + answers[-1]
        order = {t: i for i, t in enumerate(tokens)}
        items = self._took(queue, takes + lean, answers)
        items.sort(key=lambda item: order[item.token])  # claim order: priority, then round-robin
        return items

    def _pipe_take_lean(self, pipe, queue: str, lean: list[tuple[str, list[str]]]) -> None:
        """One `take_lean` call for one-item requests of `queue`'s slot, one
        token each (which it checks this worker holds)."""
        cfg, qk = self.config(queue), self.keys.queue(queue)
        self.scripts.pipe(pipe, "take_lean", [qk.held, *(k for rid, _ in lean for k in self.keys.request(rid).all())],
                          [self.id, cfg.lease_ms, cfg.max_attempts, cfg.retention_ms, self.client.channel,
                           *(toks[0] for _, toks in lean)])

    def _took(self, queue: str, takes: list[tuple[str, list[str]]], answers: list,
              claimed: dict[str, float] | None = None) -> list[Item]:
        """Items from `take` answers, one call per (request id, tokens); each
        token left without an item gets its release. `claimed`: when kept
        tokens first came out of the queue (others: the last claim)."""
        cfg = self.config(queue)
        items, releases = [], self._releases[queue]
        for (rid, toks), got in zip(takes, answers):
            if isinstance(got, int):  # NOT_FOUND: created a moment ago elsewhere, or long gone
                later = int(time.time() * 1000) + 1000
                for t in toks:
                    releases += [t, "park", later]
                self.upkeep.retire_if_stale(queue, rid)
                continue
            kind, wake_at, processor, dedup, own_limit, priority, lean = got[:7]
            kind, wake_at, rest = int(kind), int(wake_at), got[7:]
            limit = float(own_limit) if own_limit != "" else cfg.time_limit_seconds
            given = []
            for n in range(0, len(rest), 4):
                token = toks[n // 4]
                at = claimed.get(token, self._claimed_at) if claimed else self._claimed_at
                given.append(Item(queue, token, rid, rest[n], int(rest[n + 1]), rest[n + 2], int(rest[n + 3]),
                                  processor, limit=limit, priority=int(priority), lean=lean == 1, claimed=at))
            if given and not self.abilities.can_run(processor):
                self._unrunnable(queue, processor, given)  # back untouched, for a worker that can (routing.py)
            elif given:
                items += given
                self._async_queue[queue] = self.executor.is_async(processor)
            left = toks[len(rest) // 4:]
            if kind == 4:
                self._finished(queue, rid, dedup)
            for t in left:
                if kind == 2:  # in flight elsewhere or waiting to retry: come back then
                    releases += [t, "park", wake_at]
                elif kind == 3:  # streamed request waiting for items: `add` wakes it (or a
                    # minute passes, in case the producer died between adding and waking)
                    releases += [t, "park", int(time.time() * 1000) + PARK_IDLE_MS]
                elif kind == 5:  # a kept token that may not go on (keeping.py)
                    releases += [t, "return", 0]
                else:
                    releases += [t, "drop", 0]
        for item in items:
            self._held[item.token] = item
        return items
