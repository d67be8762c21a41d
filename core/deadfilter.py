"""The dead letters' search filter from outside input (the page's GET
parameters, the API's query), shared so that both accept the same values
and refuse the same ones with the same reasons.

Parameters: `error` (text the error contains, any case), `processor`,
`queue`, `from` and `to` (a date, a date and time as ISO 8601 or as a
browser's datetime-local field sends it, in the server's time zone unless
it says its own, or Unix seconds), `request` (one request's only). A bad
value is dropped and named in `errors`; the rest of the filter still holds.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from queueadmin.core.engine.client.deadscan import DeadFilter
from queueadmin.core.engine.errors import QueueError

RID = re.compile(r"^[0-9A-Za-z_-]{1,32}$")
SECONDS = re.compile(r"^\d{1,11}(\.\d{1,6})?$")
PARAMS = ("error", "processor", "queue", "from", "to", "request")


@dataclass
class Parsed:
    flt: DeadFilter
    request: str | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def searching(self) -> bool:
        """Whether matching reads each letter's record (a bounded walk, "N+")."""
        return self.flt.reads_records

    def query(self) -> dict[str, str]:
        """The accepted filter as query parameters (what round-trips in a URL)."""
        f = self.flt
        out = {"error": f.text, "processor": f.processor, "queue": f.queue,
               "from": _iso(f.since), "to": _iso(f.until), "request": self.request or ""}
        return {k: v for k, v in out.items() if v}


def parse(params, queues: list[str] | None = None) -> Parsed:
    """A filter from a mapping of strings; `queues`: the names a queue may have."""
    errors: list[str] = []
    get = lambda name: str(params.get(name) or "").strip()  # noqa: E731
    values = {"text": get("error"), "processor": get("processor"), "queue": get("queue"),
              "since": parse_when(get("from"), "from", errors), "until": parse_when(get("to"), "to", errors, end=True)}
    if values["queue"] and queues is not None and values["queue"] not in queues:
        errors.append(f"There is no queue named “{values['queue'][:64]}”.")
        values["queue"] = ""
    for name in ("text", "processor", "queue"):
        try:
            DeadFilter.checked(**{name: values[name]})
        except QueueError as exc:
            errors.append(_sentence(exc))
            values[name] = ""
    try:
        flt = DeadFilter.checked(**values)
    except QueueError as exc:  # from after to: the range is dropped, the rest holds
        errors.append(_sentence(exc))
        flt = DeadFilter.checked(**{**values, "since": None, "until": None})
    rid = get("request") or None
    if rid and not RID.match(rid):
        errors.append("A request id is 1-32 letters, digits, '-' or '_'.")
        rid = None
    return Parsed(flt, rid, errors)


def parse_when(text: str, name: str, errors: list[str], end: bool = False) -> float | None:
    """Unix seconds from a date, a date and time, or seconds; None (and an
    error named) when it is none of them. A date alone as `to` means its end."""
    if not text:
        return None
    try:
        if SECONDS.match(text):
            return float(text)
        when = parse_datetime(text.replace(" ", "T", 1))
        if when is None:
            day = parse_date(text)
            if day is None:
                raise ValueError(text)
            when = datetime.combine(day + timedelta(days=1) if end else day, time.min)
            if end:
                when -= timedelta(microseconds=1)
        if timezone.is_naive(when):
            when = timezone.make_aware(when, timezone.get_current_timezone())
        seconds = when.timestamp()
    except (ValueError, OverflowError, OSError):
        seconds = None
    if seconds is None or not 0 <= seconds < 10**11:
        errors.append(f"The {name} time “{text[:40]}” is not a date or time (use 2026-11-24 or 2026-11-24T09:30).")
        return None
    return seconds


def _iso(seconds: float | None) -> str:
    if seconds is None:
        return ""
    when = timezone.localtime(datetime.fromtimestamp(seconds, tz=timezone.get_current_timezone()))
    return when.replace(tzinfo=None).isoformat(timespec="seconds" if when.microsecond == 0 else "microseconds")


def _sentence(exc: Exception) -> str:
    text = str(exc)
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")
