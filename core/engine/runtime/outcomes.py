"""What a worker does with finished runs: each becomes an outcome (done,
retry, dead, cancelled) and a result record, queued to reach Redis with the
next dispatch round trip along with its token's return; counted for the
dashboard's throughput, the metrics (stats.py) and the log.

A mixin of `Worker` (worker.py), which owns the state it uses.
"""
from __future__ import annotations

import logging
import os

import redis

from queueadmin.core.engine import events
from queueadmin.core.engine.features import stats
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.runtime.item import Item, Ran, record
from queueadmin.core.engine.client.limits import oneline, encode, encode_value

log = logging.getLogger("queueadmin.worker")

TEXT_CAP = 64 * 1024  # characters kept of an error or traceback (a log has its own cap: itemlog.py)


class Outcomes:
    def on_done(self, runs: list[Ran]) -> None:
        """From executor threads (and the watchdog): runs that ended."""
        self._outcomes.extend(runs)
        self._wakeup.set()

    def _collect(self) -> None:
        """Turn finished runs into acknowledgements for the next round trip."""
        if not self._outcomes:
            return
        while self._outcomes:
            # removed only once queued: _queue_ack may raise (reading a queue's settings
            # from a Redis that is failing over), and a lost outcome would strand its item
            self._queue_ack(self._outcomes[0])
            self._outcomes.popleft()
        # limits are looked at after items finish, so every process makes progress
        if self.max_items and self.processed + self.failed >= self.max_items:
            self.replace(f"reached --max-items-per-process {self.max_items}")
        elif self.max_memory_mb and _rss_mb() > self.max_memory_mb:
            self.replace(f"memory above --max-memory-per-process {self.max_memory_mb:g} MB")

    def _queue_ack(self, ran: Ran) -> None:
        """The outcome goes to Redis with the next dispatch round trip, along
        with the token's return."""
        item = ran.item
        cfg = self.config(item.queue)
        took = ran.finished - item.started
        if not item.stop_reason:
            avg = self._avg.get(item.queue)
            self._avg[item.queue] = took if avg is None else 0.8 * avg + 0.2 * took
        outcome, text = self._outcome(ran, cfg)
        retry_ms = int(cfg.backoff(item.attempt) * 1000) if outcome == "retry" else 0
        self._acks.setdefault(item.rid, (item.queue, []))[1].extend(
            [item.entry, item.index, outcome, text, retry_ms])
        self._acked.append(item)
        self._release_token(item, outcome)  # or keep it for the request's next item (keeping.py)
        self._count(item, outcome, took, ran)
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
                body = '"result":' + encode_value(ran.result, "it")
            except QueueError as exc:
                return self._failed(ran, cfg, f"ValueError: the result cannot be stored: {exc}")
            return "done", self._record(ran, "done", body)
        if item.stop_reason == "cancelled":
            return "cancelled", self._record(ran, "cancelled", '"error":' + encode(_storable(ran.error)))
        unknown = ran.error.startswith("ProcessorError")
        outcome = "dead" if unknown or item.attempt >= cfg.max_attempts else "retry"
        body = f'"error":{encode(_storable(ran.error))},"traceback":{encode(_storable(ran.traceback))}'
        return outcome, self._record(ran, "retrying" if outcome == "retry" else "failed", body)

    def _failed(self, ran: Ran, cfg: QueueConfig, error: str, with_log: bool = True) -> tuple[str, str]:
        """A run whose outcome cannot be stored as it is: a failed attempt
        with `error`, under the queue's retry policy."""
        ran.error = error = _storable(error)  # for the log line (_count)
        outcome = "dead" if ran.item.attempt >= cfg.max_attempts else "retry"
        body = '"result":null,"error":' + encode(error)
        status = "retrying" if outcome == "retry" else "failed"
        if with_log:
            return outcome, self._record(ran, status, body)
        item = ran.item
        return outcome, record(status, body, item.attempt, self._id_json, item.started, ran.finished)

    def _record(self, ran: Ran, status: str, body: str) -> str:
        item = ran.item
        if item.log.lines:  # what the item logged goes with its result
            body += ',"log":' + encode(_storable(item.log.text(), cap=0))  # capped as it was kept (itemlog.py)
        return record(status, body, item.attempt, self._id_json, item.started, ran.finished)

    def _count(self, item: Item, outcome: str, took: float, ran: Ran) -> None:
        """Throughput, metrics and log line of one outcome."""
        counts = self._done.setdefault(item.queue, [0, 0])
        counts[0 if outcome == "done" else 1] += 1
        if outcome == "done":
            self.processed += 1
        else:
            self.failed += 1
        figures = self._stats.get(item.queue) or self._stats.setdefault(item.queue, stats.batch())
        if outcome in stats.OUTCOMES:
            figures[stats.OUTCOMES[outcome]] += 1
        figures["run_times"].append(took)
        if item.attempt == 1:
            figures["waits"].append(item.started - stats.enqueued_at(item.entry))
        level = logging.DEBUG if outcome == "done" else logging.WARNING
        if log.isEnabledFor(level):
            log.log(level, "item %s#%s %s in %.3fs%s", item.rid, item.index, outcome, took,
                    f": {ran.error}" if ran.error else "",
                    extra={"request_id": item.rid, "index": item.index, "queue": item.queue,
                           "worker": self.id, "attempt": item.attempt, "duration": round(took, 6),
                           "outcome": outcome})

    def _abandon(self, items: list[Item]) -> None:
        """Hand held items back: due again now, their tokens returned."""
        try:
            pipe = self.redis.pipeline(transaction=False)
            for item in items:
                rk = self.keys.request(item.rid)
                self.scripts.pipe(pipe, "requeue", [rk.items, rk.leases], ["ids", item.entry])
                self._releases[item.queue] += [item.token, "return", 0]
                self._held.pop(item.token, None)
            self.scripts.execute(pipe)
            log.info("worker %s handed back %d held item(s)", self.id, len(items))
        except redis.RedisError:
            pass  # their leases bring them back

    def _finished(self, queue: str, rid: str, dedup_key: str) -> None:
        """A request closed: it is retired from its queue in the next round trip."""
        self._finishing[rid] = (queue, dedup_key)


def _storable(text: str, cap: int = TEXT_CAP) -> str:
    """An error, traceback or log as valid Unicode of at most `cap`
    characters (0: as it is): a lone surrogate (which Redis cannot store)
    becomes an escape."""
    if cap and len(text) > cap:
        text = text[:cap] + f"… (cut at {cap} characters)"
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _rss_mb() -> float:
    """This process's resident memory (Linux), in MB."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        return 0.0
