"""An item's attempts: which worker ran each, when, for how long, and how it
ended, for the item's page (core/queries/item.py) and the API.

Kept in the request's results hash, beside the item's result record, under
the field `field(index)`: JSON lines, the last 10 attempts (lua/_request.lua,
`add_attempt`), so they expire, are kept and are cleaned up exactly as the
item's result is, and a request costs no extra key. Each line is
{"n": attempt, "w": worker id, "t": taken at (ms), "r": ran for (ms),
"o": outcome, "y": why it ended}, about 100 bytes.

Who writes them, in the round trips that already happen:

* a worker, in its acknowledgement (ack-5, ack_lean), for every attempt
  that did not end done: retried, dead, stopped, cancelled;
* a take (take-5, take_lean) that hands out again an item whose previous
  attempt left no line: that attempt's lease ran out without an outcome
  (its worker died, froze or was cut off, or an operator requeued it), and
  the take names its worker and when it was taken.

A done attempt writes nothing: the result record says who ran it, when and
for how long, so the usual item (done at its first attempt) costs nothing.
`timeline` puts the lines, the result record and the holder of a running
item together.
"""
from __future__ import annotations

import json
import math

from queueadmin.core.engine.features import encryption

KEPT = 10  # attempts kept per item (ATTEMPTS_KEPT in lua/_request.lua)
WHY_CAP = 300  # characters of the error's first line kept as the reason

# how an attempt ended, as the page names it
DONE, RETRIED, DEAD, STOPPED, CANCELLED, LEASE_EXPIRED, RUNNING = (
    "done", "retried", "dead", "stopped", "cancelled", "lease-expired", "running")
_BY_ACK = {"retry": RETRIED, "dead": DEAD, "cancelled": CANCELLED}
_LEASE_WHY = "no outcome before its lease ran out: its worker died, stalled or was cut off, or it was requeued"


def field(index: int | str) -> str:
    """The results-hash field that holds an item's attempts."""
    return f"a:{index}"


def line(attempt: int, worker: str, started: float, finished: float, outcome: str, error: str | None,
         stop_reason: str | None = None) -> str:
    """The line an acknowledgement writes for an attempt (`outcome` as ack-5
    takes it: retry | dead | cancelled); "" for a done attempt (its record)."""
    if outcome == "done":
        return ""
    ended = STOPPED if stop_reason == "stopped" else _BY_ACK.get(outcome, outcome)
    return json.dumps({"n": attempt, "w": worker, "t": int(started * 1000), "r": max(0, int((finished - started) * 1000)),
                       "o": ended, "y": first_line(error)}, separators=(",", ":"), ensure_ascii=False)


def first_line(text: str | None) -> str:
    """Why an attempt ended: its error's first line, capped."""
    if not text:
        return ""
    first = str(text).strip().split("\n", 1)[0]
    return first if len(first) <= WHY_CAP else first[:WHY_CAP] + "…"


def parse(raw: str | None) -> list[dict]:
    """The stored lines as attempts (a line that is not JSON is skipped: it
    cannot break a page)."""
    out = []
    for text in (raw or "").split("\n"):
        try:
            entry = json.loads(text)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("n"), int):
            encryption.open_line(entry)  # an encrypted queue's error, sealed
            out.append(_shown(entry["n"], entry.get("w"), entry.get("t"), entry.get("r"), entry.get("o"),
                              entry.get("y")))
    return out


def timeline(raw: str | None, record: dict, holder: dict | None = None) -> list[dict]:
    """Every attempt kept, oldest first: the stored lines; the attempt the
    result record describes when it ended done (or ended before attempts
    were kept); and, while a worker holds the item, the attempt it runs
    (`holder`: {worker, attempt, taken_at} or None)."""
    shown = parse(raw)
    numbers = {a["n"] for a in shown}
    n = record.get("attempts")
    if isinstance(n, int) and n not in numbers and record.get("status") in ("done", "failed", "retrying"):
        started, finished = _number(record.get("started_at")), _number(record.get("finished_at"))
        outcome = DONE if record.get("status") == "done" else (DEAD if record.get("status") == "failed" else RETRIED)
        shown.append(_shown(n, record.get("worker"), started * 1000 if started else None,
                            (finished - started) * 1000 if started and finished else None, outcome,
                            first_line(record.get("error"))))
        numbers.add(n)
    if holder and holder.get("attempt") not in numbers:
        shown.append({**_shown(holder["attempt"], holder.get("worker"), (holder.get("taken_at") or 0) * 1000, None,
                               RUNNING, ""), "live": True})
    shown.sort(key=lambda a: (a["taken_at"] or 0, a["n"]))
    return shown


def _shown(n, worker, taken_ms, ran_ms, outcome, why) -> dict:
    worker = worker if isinstance(worker, str) else ""
    host, pid = host_pid(worker)
    outcome = outcome if isinstance(outcome, str) else ""
    why = why if isinstance(why, str) else ""
    if outcome == LEASE_EXPIRED and not why:
        why = _LEASE_WHY
    taken = _number(taken_ms)
    ran = _number(ran_ms)
    return {"n": n, "worker": worker, "host": host, "pid": pid, "taken_at": taken / 1000 if taken else None,
            "ran_for": ran / 1000 if ran is not None else None, "outcome": outcome, "why": why}


def host_pid(worker: str) -> tuple[str, int | None]:
    """A worker id is "host:pid:random" (runtime/worker.py): its host and pid."""
    parts = worker.rsplit(":", 2)
    if len(parts) == 3 and parts[1].isdigit():
        return parts[0], int(parts[1])
    return "", None


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or abs(value) > 1e15:
        return None
    return float(value)


def stored(redis, keys, rid: str, index: int) -> str | None:
    """The stored lines of an item's attempts (None: none kept)."""
    return redis.hget(keys.request(rid).results, field(index))
