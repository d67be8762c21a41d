"""Template helpers of the dashboard: times, durations, payload previews and
two small server-rendered SVG charts (depth by priority, throughput)."""
from __future__ import annotations

import json
import math
import time
from datetime import datetime, timezone

from django import template
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from queueadmin.core.queries.workers import short_id

register = template.Library()


@register.filter
def ts(epoch):
    """Epoch seconds -> '2025-01-31 14:05:09' (UTC)."""
    if not epoch:
        return "—"
    try:
        return datetime.fromtimestamp(float(epoch), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return "—"


def _utc(value) -> datetime | None:
    """Epoch seconds or an aware datetime -> a UTC datetime (None if unusable)."""
    if not value:
        return None
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc)
    try:
        return datetime.fromtimestamp(float(value), tz=timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return None


@register.filter
def when(value):
    """A <time> in UTC; static/queueadmin/time.js shows it in the viewer's time zone
    and keeps UTC in its title (what is shown without JavaScript)."""
    dt = _utc(value)
    if dt is None:
        return "—"
    text = dt.strftime("%Y-%m-%d %H:%M:%S")
    return format_html('<time datetime="{}" title="{} UTC">{} UTC</time>', dt.strftime("%Y-%m-%dT%H:%M:%SZ"), text,
                       text)


@register.filter
def when_ago(value):
    """'12 s ago' in a <time>; hovering shows the moment (local time and UTC)."""
    dt = _utc(value)
    if dt is None:
        return "—"
    text = dt.strftime("%Y-%m-%d %H:%M:%S")
    return format_html('<time datetime="{}" data-relative title="{} UTC">{}</time>', dt.strftime("%Y-%m-%dT%H:%M:%SZ"),
                       text, ago(dt.timestamp()))


@register.filter
def iso(epoch):
    if not epoch:
        return ""
    try:
        return datetime.fromtimestamp(float(epoch), tz=timezone.utc).isoformat()
    except (TypeError, ValueError, OverflowError, OSError):
        return ""


def _span(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms" if seconds else "0 s"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"
    return f"{int(seconds // 86400)} d {int(seconds % 86400 // 3600)} h"


@register.filter
def duration(seconds):
    if seconds is None or seconds == "":
        return "—"
    try:
        return _span(float(seconds))
    except (TypeError, ValueError):
        return "—"


@register.filter
def ago(epoch):
    """Epoch seconds -> '12 s ago' / 'in 3 min 2 s'."""
    if not epoch:
        return "—"
    try:
        delta = time.time() - float(epoch)
    except (TypeError, ValueError):
        return "—"
    return f"{_span(delta)} ago" if delta >= 0 else f"in {_span(delta)}"


@register.filter
def num(value):
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return value


@register.filter
def rate(value):
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "—"
    if not v:
        return "—"
    return f"{v:,.1f}/s" if v < 100 else f"{v:,.0f}/s"


@register.filter
def pct(value):
    try:
        return f"{float(value):.1f}"
    except (TypeError, ValueError):
        return "0"


@register.filter
def preview(value, length=120):
    """A payload or result as short text (JSON for non-strings); never raises,
    however deep or large the value (see `shown`)."""
    try:
        length = max(2, int(length))
    except (TypeError, ValueError):
        length = 120
    text = shown(value, length)
    return text if len(text) <= length else text[:length - 1] + "…"


@register.filter
def pretty(value):
    """A value as indented JSON, at most PRETTY_CHARS characters; never raises."""
    text = shown(value, PRETTY_CHARS, indent=2)
    return text if len(text) <= PRETTY_CHARS else text[:PRETTY_CHARS] + "\n… (cut)"


PRETTY_CHARS = 200_000
SHOWN_DEPTH = 32  # levels of lists and objects shown; deeper ones show as […] or {…}
_CUT = "\x00…\x00"  # stands for what is left out; rendered as a bare …
_CUT_JSON = json.dumps(_CUT, ensure_ascii=False)


def shown(value, chars: int, indent: int | None = None) -> str:
    """`value` as display text: strings as they are, anything else as JSON,
    enough of it for `chars` characters (the caller cuts), never more than
    SHOWN_DEPTH levels deep (its own recursion, and json's, stay bounded:
    a 5000-deep value in a template is not a RecursionError and a 500).
    Lone surrogates become escapes, so the page can be encoded."""
    if value is None:
        return ""
    try:
        if isinstance(value, str):
            text = value[:chars + 1]
        else:
            text = json.dumps(_bounded(value, SHOWN_DEPTH, [chars]), ensure_ascii=False, indent=indent)
            text = text.replace(_CUT_JSON, "…")
    except Exception:  # a value no JSON encoder takes (not from Redis): its type only
        return f"({type(value).__name__})"
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _bounded(value, depth: int, budget: list[int]):
    """A copy of `value` cut to `depth` levels and about budget[0] elements
    (each shows as one character at least), strings to that many characters."""
    budget[0] -= 1
    if isinstance(value, str):
        return value if len(value) <= budget[0] + 1 else value[:max(1, budget[0])] + "…"
    if isinstance(value, (list, tuple)):
        if not value or depth <= 0:
            return [_CUT] if value else []
        out = []
        for v in value:
            if budget[0] <= 0:
                out.append(_CUT)
                break
            out.append(_bounded(v, depth - 1, budget))
        return out
    if isinstance(value, dict):
        if not value or depth <= 0:
            return {"…": _CUT} if value else {}
        out = {}
        for k, v in value.items():
            if budget[0] <= 0:
                out["…"] = _CUT
                break
            out[str(k)] = _bounded(v, depth - 1, budget)
        return out
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


@register.filter
def short_worker(wid):
    """host:pid:rand -> host:pid, the name every page shows (queries/workers.py
    short_id; the full id in a title attribute)."""
    return short_id(wid) if wid else "—"


@register.simple_tag
def depth_chart(depth_by_priority, width=180, height=44):
    """Waiting items by priority: 20 bars of 5 levels each (0-4 on the left,
    95-99 on the right), log-scaled height, exact counts in each bar's title."""
    buckets = [0] * 20
    detail = [[] for _ in range(20)]
    for p, n in depth_by_priority or []:
        p, n = int(p), int(n)
        if n:
            b = min(19, max(0, p // 5))
            buckets[b] += n
            detail[b].append(f"p{p}: {n:,}")
    top = max([math.log10(n + 1) for n in buckets if n] or [1])
    slot = width / 20
    parts = []
    for b, n in enumerate(buckets):
        x = f"{b * slot + 1:.1f}"
        w = f"{slot - 2:.1f}"
        parts.append(format_html('<rect class="track" x="{}" y="0" width="{}" height="{}"/>', x, w, height))
        if n:
            h = max(3.0, height * math.log10(n + 1) / top)
            parts.append(format_html('<rect x="{}" y="{}" width="{}" height="{}"><title>priority {}–{}: {} waiting ({})'
                                     '</title></rect>', x, f"{height - h:.1f}", w, f"{h:.1f}", b * 5, b * 5 + 4,
                                     f"{n:,}", ", ".join(detail[b])))
    label = "; ".join(d for ds in detail for d in ds) or "nothing waiting"
    return format_html('<svg class="chart" viewBox="0 0 {} {}" preserveAspectRatio="none" role="img" '
                       'aria-label="waiting by priority: {}">{}</svg>', width, height, label, mark_safe("".join(parts)))


@register.simple_tag
def throughput_chart(series, width=180, height=44, cls=""):
    """Stacked bars per minute: done (bottom) and failed (top)."""
    series = [(int(d), int(f)) for d, f in series or []]
    if not series:
        return ""
    peak = max(d + f for d, f in series) or 1
    bw = width / len(series)
    parts = []
    for i, (d, f) in enumerate(series):
        x = i * bw + 1
        hd = (height - 2) * d / peak
        hf = (height - 2) * f / peak
        if d:
            parts.append(format_html('<rect class="ok" x="{}" y="{}" width="{}" height="{}">'
                                     '<title>{} done</title></rect>', f"{x:.1f}", f"{height - hd:.1f}",
                                     f"{bw - 2:.1f}", f"{hd:.1f}", f"{d:,}"))
        if f:
            parts.append(format_html('<rect class="bad" x="{}" y="{}" width="{}" height="{}">'
                                     '<title>{} failed</title></rect>', f"{x:.1f}", f"{height - hd - hf:.1f}",
                                     f"{bw - 2:.1f}", f"{hf:.1f}", f"{f:,}"))
    return format_html('<svg class="chart tp {}" viewBox="0 0 {} {}" preserveAspectRatio="none" role="img" '
                       'aria-label="items per minute, last {} minutes"><line x1="0" y1="{}" x2="{}" y2="{}"/>{}'
                       '</svg>', cls, width, height, len(series), height - 0.5, width, height - 0.5,
                       mark_safe("".join(parts)))


@register.simple_tag(takes_context=True)
def page_url(context, number):
    """The current filter query string with another page number."""
    qs = context.get("filter_qs", "")
    return f"?{qs}&page={number}" if qs else f"?page={number}"


STATE_CLASS = {"completed": "ok", "done": "ok", "running": "run", "queued": "wait", "pending": "wait",
               "scheduled": "sched", "failed": "bad", "cancelled": "muted", "expired": "warn", "retrying": "warn",
               "retried": "muted", "stuck": "bad", "corrupt": "bad"}


@register.filter
def state_class(state):
    return STATE_CLASS.get(str(state), "muted")
