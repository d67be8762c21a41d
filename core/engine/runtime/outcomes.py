"""What a worker does with finished runs: each becomes an outcome (done,
retry, dead, cancelled) and a result record, queued to reach Redis with the
next dispatch round trip along with its token's return; counted for the
dashboard's throughput, the metrics (stats.py) and the log.

`Outcomes` owns what waits for that round trip: the finished runs from the
executor's threads, the acknowledgements (one `ack` per request, one
`ack_lean` per queue for one-item requests), the requests that finished
and are to be retired, and the figures not yet sent. The round trip
(cycle.py) asks it to put them on the pipeline (`put_*`) and tells it
what was sent (`sent`, `acknowledged`).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from typing import Iterator

import redis

from queueadmin.core.engine import attempts, events
from queueadmin.core.engine.client.limits import encode, encode_value, oneline
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features import encryption, history, stats
from queueadmin.core.engine.hooks import HOOKS
from queueadmin.core.engine.runtime.item import Held, Item, Ran, record
from queueadmin.core.engine.runtime.keeping import Keeping
from queueadmin.core.engine.runtime.pace import Pace
from queueadmin.core.engine.store import Store
from queueadmin.core.engine.store.request_slot import Acked
from queueadmin.core.engine.store.trip import Trip

log = logging.getLogger("queueadmin.worker")

TEXT_CAP = 64 * 1024  # characters kept of an error or traceback (a log has its own cap: itemlog.py)
# an outcome as the history counts it: failed or not; a cancelled attempt is neither (history.Point.observe)
_FAILED = {"done": False, "retry": True, "dead": True}
FIGURES_EVERY = 1.0  # seconds between sends of throughput and metrics figures while busy (a few commands each)


class Outcomes:
    def __init__(self, store: Store, pace: Pace, keeping: Keeping, held: Held, worker_id: str, channel: str,
                 wakeup: threading.Event):
        self.store, self.keys, self.pace, self.keeping, self.held = store, store.keys, pace, keeping, held
        self.id, self.channel, self._wakeup = worker_id, channel, wakeup
        self._id_json = encode(worker_id)
        self.processed = self.failed = 0
        self.runs: deque[Ran] = deque()  # finished runs, from executor threads
        self.acks: dict[str, tuple[str, list]] = {}  # request id -> (queue, flat outcome fields)
        self.acked: list[Item] = []  # items whose outcome is in acks
        self.finishing: dict[str, tuple[str, str]] = {}  # finished request -> (queue, de-dup key), to retire
        self.done: dict[str, list[int]] = {}  # queue -> [done, failed] since the last send
        self.stats: dict[str, dict] = {}  # queue -> figures for core.engine.stats since the last send
        self.history = history.Recorder()  # the metrics history's points since the last send
        self.figures_due = 0.0  # when done and stats go out next (FIGURES_EVERY)

    def on_done(self, runs: list[Ran]) -> None:
        """From executor threads (and the watchdog): runs that ended."""
        self.runs.extend(runs)
        self._wakeup.set()

    def pending(self, counts: bool = False) -> bool:
        """Whether acknowledgements or retirements (and with `counts`, figures) wait for a round trip."""
        return bool(self.acks or self.finishing or (counts and self.done))

    def collect(self) -> bool:
        """Turn finished runs into acknowledgements for the next round trip;
        True if there were any."""
        if not self.runs:
            return False
        while self.runs:
            # removed only once queued: _queue_ack may raise (reading a queue's settings
            # from a Redis that is failing over), and a lost outcome would strand its item
            self._queue_ack(self.runs[0])
            self.runs.popleft()
        return True

    def _queue_ack(self, ran: Ran) -> None:
        """The outcome goes to Redis with the next dispatch round trip, along
        with the token's return."""
        item = ran.item
        cfg = self.pace.config(item.queue)
        took = ran.finished - item.started
        if not item.stop_reason:
            self.pace.ran(item.queue, took)
        outcome, text = self._outcome(ran, cfg)
        retry_ms = int(cfg.backoff(item.attempt) * 1000) if outcome == "retry" else 0
        line = attempts.line(item.attempt, self.id, item.started, ran.finished, outcome, ran.error, item.stop_reason)
        if line and _sealing(cfg, item):  # its error's first line sealed, as the record's error is
            line = encryption.seal_line(line)
        self.acks.setdefault(item.rid, (item.queue, []))[1].extend(
            [item.entry, item.index, outcome, text, retry_ms, line])
        self.acked.append(item)
        self.keeping.release(item, outcome)  # or keep it for the request's next item (keeping.py)
        self._count(item, outcome, took, ran)
        if HOOKS.active:
            HOOKS.outcome(item, outcome, ran)
        if outcome == "dead":
            try:
                events.fire(events.ITEM_DEAD, events.ItemDead(item.queue, item.rid, item.entry, item.index,
                                                              item.attempt, ran.error))
            except Exception:  # a subscriber's trouble never stops the worker
                log.exception("worker %s: reporting dead item %s#%s failed", self.id, item.rid, item.index)

    def _outcome(self, ran: Ran, cfg: QueueConfig) -> tuple[str, str]:
        """done | retry | dead | cancelled, and the result record to store.
        Whatever a run returned, raised or logged, this returns a storable
        record: the worker never dies of an item's data (DESIGN.md, 14)."""
        try:
            return self._judge(ran, cfg)
        except Exception as exc:  # a bug, or data no check foresaw: the attempt fails, the worker goes on
            log.exception("worker %s: the outcome of item %s#%s", self.id, ran.item.rid, ran.item.index)
            return self._failed(ran, cfg, f"the outcome cannot be stored: {oneline(exc)}", with_log=False)

    def _judge(self, ran: Ran, cfg: QueueConfig) -> tuple[str, str]:
        item = ran.item
        if ran.ok:
            try:  # checked as items are (limits.py): JSON, finite, at most MAX_DEPTH deep, valid Unicode
                value = encode_value(ran.result, "it")
            except QueueError as exc:
                return self._failed(ran, cfg, f"ValueError: the result cannot be stored: {exc}")
            if _sealing(cfg, item):  # the value sealed, the record's shape kept (encryption.py)
                value = encode(encryption.seal(value, encryption.RESULT))
            body = '"result":' + value
            return "done", self._record(ran, "done", body)
        if item.stop_reason == "cancelled":
            return "cancelled", self._record(ran, "cancelled", '"error":' + encode(_storable(ran.error)))
        unknown = ran.error.startswith("ProcessorError")
        outcome = "dead" if unknown or item.attempt >= cfg.max_attempts else "retry"
        sealing = _sealing(cfg, item)  # errors often quote the payload: sealed too (encryption.py)
        body = (f'"error":{encode(_sealed(_storable(ran.error), sealing, encryption.ERROR))},'
                f'"traceback":{encode(_sealed(_storable(ran.traceback), sealing, encryption.TRACE))}')
        return outcome, self._record(ran, "retrying" if outcome == "retry" else "failed", body)

    def _failed(self, ran: Ran, cfg: QueueConfig, error: str, with_log: bool = True) -> tuple[str, str]:
        """A run whose outcome cannot be stored as it is: a failed attempt
        with `error`, under the queue's retry policy."""
        ran.error = error = _storable(error)  # for the log line (_count)
        outcome = "dead" if ran.item.attempt >= cfg.max_attempts else "retry"
        sealing = _sealing(cfg, ran.item)
        body = '"result":null,"error":' + encode(_sealed(error, sealing, encryption.ERROR))
        status = "retrying" if outcome == "retry" else "failed"
        if with_log:
            return outcome, self._record(ran, status, body)
        item = ran.item
        body += ',"enc":1' if sealing else ""
        return outcome, record(status, body, item.attempt, self._id_json, item.started, ran.finished)

    def _record(self, ran: Ran, status: str, body: str) -> str:
        item = ran.item
        sealing = _sealing(self.pace.config(item.queue), item)
        if item.log.lines:  # what the item logged goes with its result
            text = _storable(item.log.text(), cap=0)  # capped as it was kept (itemlog.py)
            body += ',"log":' + encode(encryption.seal(text, encryption.LOG) if sealing else text)
        if sealing:
            body += ',"enc":1'
        return record(status, body, item.attempt, self._id_json, item.started, ran.finished)

    def _count(self, item: Item, outcome: str, took: float, ran: Ran) -> None:
        """Throughput, metrics and log line of one outcome."""
        counts = self.done.setdefault(item.queue, [0, 0])
        counts[0 if outcome == "done" else 1] += 1
        if outcome == "done":
            self.processed += 1
        else:
            self.failed += 1
        figures = self.stats.get(item.queue) or self.stats.setdefault(item.queue, stats.batch())
        if outcome in stats.OUTCOMES:
            figures[stats.OUTCOMES[outcome]] += 1
        wait = item.started - stats.enqueued_at(item.entry) if item.attempt == 1 else None
        self.history.observe(item.queue, item.processor, _FAILED.get(outcome), took, wait)  # bucketed once, for both
        level = logging.DEBUG if outcome == "done" else logging.WARNING
        if log.isEnabledFor(level):
            log.log(level, "item %s#%s %s in %.3fs%s", item.rid, item.index, outcome, took,
                    f": {ran.error}" if ran.error else "",
                    extra={"request_id": item.rid, "index": item.index, "queue": item.queue,
                           "worker": self.id, "attempt": item.attempt, "duration": round(took, 6),
                           "outcome": outcome})

    def abandon(self, items: list[Item]) -> None:
        """Hand held items back: due again now, their tokens returned."""
        try:
            trip = self.store.trip()
            for item in items:
                self.store.request.requeue(item.rid, [item.entry], trip=trip)
                self.keeping.give_back(item.queue, item.token)
                self.held.drop(item)
            trip.run()
            log.info("worker %s handed back %d held item(s)", self.id, len(items))
        except redis.RedisError:
            pass  # their leases bring them back

    def finished(self, queue: str, rid: str, dedup_key: str) -> None:
        """A request closed: it is retired from its queue in the next round trip."""
        self.finishing[rid] = (queue, dedup_key)

    # -- in a round trip (cycle.py) ---------------------------------------------

    def put_retires(self, trip: Trip) -> list[str]:
        """Retire the requests that finished; returns their ids (for the reporter)."""
        for rid, (q, dedup) in self.finishing.items():
            self.store.queue.retire(q, rid, dedup, trip=trip)
        return list(self.finishing)

    def put_acks(self, trip: Trip) -> "Acks":
        """The acknowledgements waiting to reach Redis: one `ack` per request,
        and one `ack_lean` per queue for its one-item requests in its slot
        (which also retires those it closes)."""
        acks, lean = Acks(), {}
        for rid, (q, fields) in self.acks.items():
            if self.keys.in_queue_slot(rid):
                lean.setdefault(q, []).append((rid, fields))
                continue
            cfg = self.pace.config(q)
            acks.plain.append((rid, q, self.store.request.ack(rid, self.id, cfg.retention_ms, self.channel, fields,
                                                              trip=trip)))
        for q, group in lean.items():
            cfg = self.pace.config(q)
            acks.lean.append((q, [rid for rid, _ in group],
                              self.store.queue.ack_lean(q, self.id, cfg.retention_ms, self.channel, group, trip=trip)))
        return acks

    def figures_now(self, idle: bool) -> bool:
        """Whether this round trip carries the figures: at most once a
        second while busy, and at once when the worker goes idle."""
        return idle or time.monotonic() >= self.figures_due

    def put_figures(self, trip: Trip) -> None:
        """Throughput per minute (the dashboard's) and counters and histograms
        (/metrics) for what finished since they were last sent."""
        minute = int(time.time() // 60)
        for q, (done, failed) in self.done.items():
            tp = self.keys.throughput(q, minute)
            trip.pipe.hincrby(tp, "done", done)
            trip.pipe.hincrby(tp, "failed", failed)
            trip.pipe.expire(tp, 3600)
        series = self.history.by_series()
        for q, batch in self.stats.items():
            p = series.get(history.queue_series(q)) or history.Point()
            stats.record_buckets(trip.pipe, self.keys, q, **batch, run_counts=p.run, wait_counts=p.wait,
                                 run_sum=p.run_s, wait_sum=p.wait_s)
        self.history.put(self.store, trip, minute, series)

    def sent(self, figures: bool) -> None:
        """The round trip reached Redis: the acknowledged items are no longer
        held, and what it carried is done with."""
        for item in self.acked:
            self.held.drop(item)
        self.acks, self.acked, self.finishing = {}, [], {}
        if figures:
            self.done, self.stats, self.figures_due = {}, {}, time.monotonic() + FIGURES_EVERY
            self.history.clear()

    def acknowledged(self, acks: "Acks") -> list[str]:
        """Read the acknowledgements' answers: a request in its own slot that
        they closed is retired with the next round trip; returns the one-item
        requests they closed (`ack_lean` retired those already)."""
        closed = []
        for rid, q, answer in acks.answers():
            if answer.closed:
                if self.keys.in_queue_slot(rid):
                    closed.append(rid)
                else:
                    self.finished(q, rid, answer.dedup_key)
        return closed


class Acks:
    """The acknowledgement calls of one round trip: (request id, queue,
    Answer) per `ack`, (queue, request ids, Answer) per `ack_lean`."""

    __slots__ = ("plain", "lean")

    def __init__(self):
        self.plain: list = []
        self.lean: list = []

    def answers(self) -> Iterator[tuple[str, str, Acked]]:
        """(request id, queue, Acked) per request, in the order they were put."""
        for rid, q, answer in self.plain:
            yield rid, q, answer.value
        for q, rids, answer in self.lean:
            for rid, acked in zip(rids, answer.value):
                yield rid, q, acked


def _sealing(cfg: QueueConfig, item: Item) -> bool:
    """Whether an item's result, log and errors are sealed: its queue encrypts, or
    its payload was sealed (encryption turned off while it waited)."""
    return cfg.encrypt or item.payload[:1] == encryption.MARK


def _sealed(text: str, sealing: bool, purpose: str) -> str:
    """An error or traceback as stored: sealed for an encrypted queue; never
    raises (without a key, what is kept says so and holds nothing of the text)."""
    if not sealing:
        return text
    try:
        return encryption.seal(text, purpose)
    except encryption.EncryptionError as exc:
        return f"(not stored: {exc})"


def _storable(text: str, cap: int = TEXT_CAP) -> str:
    """An error, traceback or log as valid Unicode of at most `cap`
    characters (0: as it is): a lone surrogate (which Redis cannot store)
    becomes an escape."""
    if cap and len(text) > cap:
        text = text[:cap] + f"… (cut at {cap} characters)"
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def rss_mb() -> float:
    """This process's resident memory (Linux), in MB."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        return 0.0
