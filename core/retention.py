"""How long the request history (RequestRecord, core/history.py) is kept, and
pruning what is older.

Redis lets a finished request go after its queue's retention; the history in
the database keeps its summary, for ever unless `QUEUEADMIN["HISTORY_RETENTION"]`
says otherwise:

* None (the default): everything is kept;
* a number of days: finished requests (completed, failed, cancelled,
  expired) are pruned that many days after they finished;
* a dict state -> days (or None: kept), e.g. {"completed": 30, "failed": 90}:
  a state it does not name is kept.

Age is counted from `finished_at`; requests still live (scheduled, queued,
running) are never pruned. The pieces:

* `parse(value)` -> {state: days} (RetentionError says what is wrong; the
  system check queueadmin.E020 reports it);
* `prune(policy, ...)` deletes in batches of `batch_size` rows, each batch
  one `DELETE ... WHERE id = ANY(ARRAY(SELECT id ... LIMIT n))` on the
  (state, finished_at) index (PostgreSQL; `id IN (SELECT ...)` on SQLite),
  committed on its own: no row is loaded, no statement holds the table for
  long (`manage.py queue_prune`);
* `upkeep_pass()`: what a worker process does now and then (a thread
  started with Django's side of the worker, core/launch.py): when retention
  is configured and no worker anywhere has pruned within
  HISTORY_PRUNE_SECONDS (a Redis key `PREFIX:prune:lock`, SET NX PX), up
  to UPKEEP_BATCHES batches per state;
* `describe()`: the Requests page's line on how far the history goes back.

Audit entries name requests by id, without a foreign key, and are never
deleted (core/audit.py): they outlive a pruned request's row. Each prune
that deletes something leaves one entry of its own ("prune_history").
"""
from __future__ import annotations

import logging
import math
import os
import random
import socket
import threading
import time
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db import connection
from django.utils import timezone

from queueadmin.core import conf
from queueadmin.core.background import OnePerProcess

log = logging.getLogger("queueadmin.retention")

FINISHED_STATES = ("completed", "failed", "cancelled", "expired")
LIVE_STATES = ("scheduled", "queued", "running")
MAX_DAYS = 36_500  # a hundred years: beyond, say None (kept for ever)
DEFAULT_BATCH = 5000
MAX_BATCH = 100_000
UPKEEP_BATCHES = 10  # per state and upkeep pass: at most 50,000 rows of a state per pass
POLL_MAX = 60.0  # seconds between a worker's looks at the lock (at most)
LOCK_SUFFIX = "prune:lock"


class RetentionError(ValueError):
    """A retention value (setting or option) that cannot be used."""


def check_days(value, what: str, *, zero: bool = False) -> float:
    """A number of days (int or float, not a bool, finite, above 0, or at 0
    when `zero`, at most MAX_DAYS)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RetentionError(f"{what} must be a number of days, not {type(value).__name__} {value!r}"[:300])
    days = float(value)
    if not math.isfinite(days) or days < 0 or (days == 0 and not zero):
        raise RetentionError(f"{what} must be a number of days {'of 0 or more' if zero else 'above 0'}, "
                             f"not {value!r}")
    if days > MAX_DAYS:
        raise RetentionError(f"{what} must be at most {MAX_DAYS} days (leave the state out to keep it for ever), "
                             f"not {value!r}")
    return days


def check_state(name, what: str = "state") -> str:
    if not isinstance(name, str) or name not in FINISHED_STATES:
        hint = ""
        if name == "done":
            hint = " (a finished request whose items all succeeded is 'completed')"
        elif name in LIVE_STATES:
            hint = " (live requests are never pruned)"
        raise RetentionError(f"{what} {name!r}"[:200] + f" is not a finished state: use {', '.join(FINISHED_STATES)}"
                             + hint)
    return name


def parse(value) -> dict[str, float]:
    """The HISTORY_RETENTION setting as {state: days}, only the states pruned."""
    what = 'QUEUEADMIN["HISTORY_RETENTION"]'
    if value is None:
        return {}
    if isinstance(value, dict):
        out = {}
        for state, days in value.items():
            check_state(state, f"{what}: the key")
            if days is not None:
                out[state] = check_days(days, f"{what}[{state!r}]")
        return out
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        days = check_days(value, what)
        return {state: days for state in FINISHED_STATES}
    raise RetentionError(f"{what} must be None (keep for ever), a number of days, or a dict of state -> days "
                         f"such as {{\"completed\": 30, \"failed\": 90}}, not {type(value).__name__}")


def policy() -> dict[str, float]:
    """The configured retention, {state: days}; {} when nothing is pruned."""
    return parse(conf.get("HISTORY_RETENTION"))


def prune_every() -> float:
    value = conf.get("HISTORY_PRUNE_SECONDS")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        raise RetentionError(f'QUEUEADMIN["HISTORY_PRUNE_SECONDS"] must be a number of seconds of 1 or more, '
                             f"not {value!r}"[:300])
    return float(value)


def days_text(days: float) -> str:
    n = f"{days:g}"
    return f"{n} day" if days == 1 else f"{n} days"


# -- pruning ----------------------------------------------------------------------------


def cutoff(days: float, now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(days=days)


def _table():
    from queueadmin.core.models import RequestRecord

    meta, q = RequestRecord._meta, connection.ops.quote_name
    col = lambda name: q(meta.get_field(name).column)
    return q(meta.db_table), col("id"), col("state"), col("finished_at")


def matching(state: str, before: datetime):
    from queueadmin.core.models import RequestRecord

    return RequestRecord.objects.filter(state=state, finished_at__lt=before)


def delete_batch(state: str, before: datetime, limit: int,
                 after: datetime | None = None) -> tuple[int, datetime | None]:
    """Delete up to `limit` rows of `state` finished before `before` (and not
    before `after`, where the previous batch ended); returns how many, and
    (on PostgreSQL) the latest finish time among them, the next batch's
    `after`. One statement, committed on its own (outside a transaction).
    The outer condition is checked again on each row, so a row whose request
    came back to life meanwhile (a dead letter retried) is not deleted."""
    table, pk, state_col, finished = _table()
    at = connection.ops.adapt_datetimefield_value(before)
    where = f"{state_col} = %s AND {finished} < %s"
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # `= ANY(ARRAY(...))`: the ids first, then each row by its primary key (`IN (SELECT ...)` plans a
            # hash join over every row of the state, each batch); the ids in finish order from `after` on, so
            # a batch does not walk over the index entries of the rows deleted before (dead until VACUUM)
            since = "" if after is None else f" AND {finished} >= %s"
            cursor.execute(
                f"WITH gone AS (DELETE FROM {table} WHERE {pk} = ANY(ARRAY(SELECT {pk} FROM {table} "
                f"WHERE {where}{since} ORDER BY {finished} LIMIT %s)) AND {where} RETURNING {finished}) "
                f"SELECT count(*), max({finished}) FROM gone",
                [state, at, *([] if after is None else [after]), limit, state, at])
            count, latest = cursor.fetchone()
            return count, latest
        if connection.vendor == "sqlite":
            # `+column` keeps the outer check off the index: the rows are found by their ids (the primary key),
            # not by walking every row of the state again at each batch
            cursor.execute(f"DELETE FROM {table} WHERE {pk} IN (SELECT {pk} FROM {table} WHERE {where} LIMIT %s) "
                           f"AND +{state_col} = %s AND +{finished} < %s", [state, at, limit, state, at])
            return max(cursor.rowcount, 0), None
        # elsewhere (MySQL has no LIMIT in an IN subquery): the ids first, bounded by `limit`
        ids = list(matching(state, before).values_list("id", flat=True)[:limit])
        done = 0
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            cursor.execute(f"DELETE FROM {table} WHERE {pk} IN ({', '.join(['%s'] * len(chunk))}) AND {where}",
                           [*chunk, state, at])
            done += max(cursor.rowcount, 0)
        return done, None


def prune(rules: dict[str, float], *, batch_size: int = DEFAULT_BATCH, max_batches: int | None = None,
          dry_run: bool = False, now: datetime | None = None, progress=None) -> dict[str, int]:
    """Delete (or with `dry_run` count) each state's rows finished more than
    its days ago. `progress(state, batch, total)` is called after each batch.
    Returns {state: rows}; with `max_batches`, at most that many batches per
    state (the rest waits for the next call)."""
    now = now or timezone.now()
    counts: dict[str, int] = {}
    for state, days in rules.items():
        before = cutoff(days, now)
        if dry_run:
            counts[state] = matching(state, before).count()
            continue
        total = batches = 0
        after = None
        while max_batches is None or batches < max_batches:
            n, after = delete_batch(state, before, batch_size, after)
            batches += 1
            total += n
            if progress is not None and n:
                progress(state, n, total)
            if n < batch_size:
                break
        counts[state] = total
    return counts


def record(counts: dict[str, int], rules: dict[str, float], actor) -> None:
    """One audit entry for a prune that deleted something."""
    from queueadmin.core import audit

    total = sum(counts.values())
    if total:
        audit.record(actor, "prune_history", target="request history", count=total,
                     detail={"deleted": {s: n for s, n in counts.items() if n},
                             "older_than_days": {s: rules[s] for s in counts}})


# -- the workers' upkeep ------------------------------------------------------------------


def lock_key() -> str:
    return f"{conf.get('PREFIX')}:{LOCK_SUFFIX}"


def upkeep_pass(by: str = "", now: datetime | None = None) -> dict[str, int] | None:
    """One pruning pass by a worker process: None when retention is not
    configured (or is wrong) or another worker pruned within
    HISTORY_PRUNE_SECONDS; else {state: rows deleted}."""
    from queueadmin.core import audit, clients

    try:
        rules, every = policy(), prune_every()
    except RetentionError as exc:
        log.error("history retention: %s; nothing pruned (`manage.py check` says more)", exc)
        return None
    if not rules:
        return None
    by = by or f"{socket.gethostname()}:{os.getpid()}"
    if not clients.redis_client().set(lock_key(), by, nx=True, px=int(every * 1000)):
        return None  # pruned elsewhere (or here) less than HISTORY_PRUNE_SECONDS ago
    started = time.monotonic()
    counts = prune(rules, batch_size=DEFAULT_BATCH, max_batches=UPKEEP_BATCHES, now=now)
    total = sum(counts.values())
    if total:
        record(counts, rules, audit.Actor("system (worker upkeep)", "system"))
        log.info("history retention: pruned %d request(s) (%s) in %.1fs", total,
                 ", ".join(f"{s} {n}" for s, n in counts.items() if n), time.monotonic() - started)
    else:
        log.debug("history retention: nothing to prune")
    return counts


class Pruner:
    """The thread of a worker process that runs `upkeep_pass` now and then:
    it looks at the lock every HISTORY_PRUNE_SECONDS (at most every
    POLL_MAX seconds), so one pass runs per period across all workers."""

    def __init__(self, stop: threading.Event | None = None):
        self.stop = stop or threading.Event()

    def run(self) -> None:
        wait = random.uniform(1.0, 5.0)  # not every worker of a fleet at once after a restart
        while not self.stop.wait(wait):
            try:
                wait = min(POLL_MAX, prune_every())
            except RetentionError:
                wait = POLL_MAX
            try:
                upkeep_pass()
            except Exception:  # the database or Redis away: the next pass tries again
                log.exception("history retention: the pruning pass failed")
            finally:
                connection.close()  # no connection held between passes


_pruner = OnePerProcess("history-prune", lambda: Pruner().run)


def start() -> threading.Thread:
    """Start this process's pruning thread once (it does nothing unless
    HISTORY_RETENTION is set)."""
    return _pruner.start()


# -- the dashboard ----------------------------------------------------------------------------


def describe() -> dict:
    """For the Requests page: {"kept": what is kept, "oldest": the oldest
    request's creation (None: no history), "text": the line shown}."""
    from queueadmin.core.models import RequestRecord

    try:
        rules = policy()
        if not rules:
            kept = "History kept for ever"
        elif set(rules) == set(FINISHED_STATES) and len(set(rules.values())) == 1:
            kept = f"History kept {days_text(next(iter(rules.values())))} after a request finishes"
        else:
            parts = [f"{s} {days_text(rules[s])}" for s in FINISHED_STATES if s in rules]
            forever = [s for s in FINISHED_STATES if s not in rules]
            if forever:
                parts.append(f"{' and '.join(forever)} for ever")
            kept = "History kept: " + ", ".join(parts)
    except RetentionError:
        kept = "History retention setting is invalid (see manage.py check): nothing is pruned"
    oldest = RequestRecord.objects.order_by("created_at").values_list("created_at", flat=True).first()
    since = f"oldest: {oldest.astimezone(dt_timezone.utc):%Y-%m-%d}" if oldest else "none yet"
    return {"kept": kept, "oldest": oldest, "text": f"{kept} ({since})."}
