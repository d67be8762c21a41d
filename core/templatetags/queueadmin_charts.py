"""The history charts drawn on the server as SVG (no script, so the strict
CSP holds and they work without JS): axes with values, a hover box per
point (an SVG <title>, which browsers show as a tooltip, and a CSS
highlight), bars for counts and lines for times.

Axis labels are SVG text in a fixed viewBox scaled to the panel's width
(uniformly, so text keeps its shape); lines keep their width at any scale
(vector-effect in app's charts.css)."""
from __future__ import annotations

import math
from datetime import datetime, timezone

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from queueadmin.core.queries import charts
from queueadmin.core.views.queue_page import charts_context

register = template.Library()

W, H = 480, 172
LEFT, RIGHT, TOP, BOTTOM = 50, 10, 10, 24
PLOT_W, PLOT_H = W - LEFT - RIGHT, H - TOP - BOTTOM


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above `value`."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 5, 10):
        if value <= m * power * (1 + 1e-9):
            return m * power
    return 10 * power


def seconds_text(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1000:.0f} ms" if value >= 0.001 or not value else f"{value * 1000:.1f} ms"
    if value < 60:
        return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"
    if value < 3600:
        return f"{value / 60:.1f} min" if value < 600 else f"{value / 60:.0f} min"
    if value < 86400:
        return f"{value / 3600:.1f} h"
    return f"{value / 86400:.1f} d"


def count_text(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    if value >= 10 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 1 else f"{value:.2g}"


UNITS = {"seconds": seconds_text, "count": count_text}


def time_text(epoch: float, step_s: int, span_s: int) -> str:
    at = datetime.fromtimestamp(epoch, tz=timezone.utc)
    if span_s > 86400:
        return at.strftime("%d %b %H:%M") if step_s < 86400 else at.strftime("%d %b")
    return at.strftime("%H:%M")


def axis_text(epoch: float, span_s: int) -> str:
    at = datetime.fromtimestamp(epoch, tz=timezone.utc)
    return at.strftime("%d %b") if span_s > 86400 else at.strftime("%H:%M")


@register.simple_tag
def history_chart(series, times, step_s, kind="lines", unit="count", label=""):
    """One chart: `series` is [(css name, label, values)], `times` the start
    of each point (epoch s), `kind` bars (stacked counts) or lines."""
    n = len(times)
    if not n:
        return ""
    fmt = UNITS.get(unit, count_text)
    if kind == "bars":
        stacked = [sum(v[i] or 0 for _, _, v in series) for i in range(n)]
        top = nice_ceiling(max(stacked, default=0))
    else:
        top = nice_ceiling(max((x for _, _, v in series for x in v if x is not None), default=0))
    slot = PLOT_W / n
    span_s = n * step_s
    parts = [_grid(top, fmt), _x_axis(times, slot, step_s, span_s)]
    parts.append(_bars(series, slot, top) if kind == "bars" else _lines(series, slot, top))
    parts.append(_hover(series, times, slot, step_s, span_s, fmt))
    return format_html('<svg class="hchart-svg" viewBox="0 0 {} {}" role="img" aria-label="{}">{}</svg>',
                       W, H, label, mark_safe("".join(parts)))


def _f(value: float) -> str:
    """A coordinate as text (format_html escapes its arguments before formatting them)."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _y(value: float, top: float) -> float:
    return TOP + PLOT_H - PLOT_H * min(value, top) / top


def _grid(top: float, fmt) -> str:
    rows = []
    for frac in (0, 0.5, 1):
        y = _y(top * frac, top)
        rows.append(format_html('<line class="grid{}" x1="{}" y1="{}" x2="{}" y2="{}"/>'
                                '<text class="y" x="{}" y="{}">{}</text>', " base" if not frac else "",
                                LEFT, _f(y), W - RIGHT, _f(y), LEFT - 6, _f(y + 4), fmt(top * frac)))
    return "".join(rows)


def _x_axis(times, slot, step_s, span_s) -> str:
    n, marks = len(times), []
    for i in sorted({0, n // 3, 2 * n // 3}):
        marks.append(format_html('<text class="x" x="{}" y="{}">{}</text>', _f(LEFT + i * slot), H - 6,
                                 axis_text(times[i], span_s)))
    marks.append(format_html('<text class="x now" x="{}" y="{}">now</text>', W - RIGHT, H - 6))
    return "".join(marks)


def _bars(series, slot, top) -> str:
    out, gap = [], min(1.0, slot * 0.2)
    for i in range(len(series[0][2])):
        base = 0.0
        for name, _, values in series:
            v = values[i] or 0
            if v <= 0:
                continue
            y0, y1 = _y(base, top), _y(base + v, top)
            out.append(format_html('<rect class="s-{}" x="{}" y="{}" width="{}" height="{}"/>', name,
                                   _f(LEFT + i * slot + gap / 2), _f(y1), _f(max(slot - gap, 0.5)),
                                   _f(max(y0 - y1, 0.6))))
            base += v
    return "".join(out)


def _lines(series, slot, top) -> str:
    """A polyline per run of known values (a gap where a point has none)."""
    out = []
    for name, _, values in series:
        run: list[str] = []
        for i, v in enumerate(values + [None]):
            if v is not None:
                run.append(f"{LEFT + (i + 0.5) * slot:.1f},{_y(v, top):.1f}")
                continue
            if len(run) > 1:
                out.append(format_html('<polyline class="s-{}" points="{}"/>', name, " ".join(run)))
            elif run:
                x, y = run[0].split(",")
                out.append(format_html('<circle class="s-{}" cx="{}" cy="{}" r="2"/>', name, x, y))
            run = []
    return "".join(out)


def _hover(series, times, slot, step_s, span_s, fmt) -> str:
    """A transparent column per point whose <title> lists every series' value."""
    cols = []
    for i, at in enumerate(times):
        text = time_text(at, step_s, span_s) + (" (now)" if i == len(times) - 1 else "") + "\n" + "\n".join(
            f"{label}: {fmt(values[i])}" for _, label, values in series)
        cols.append((f"{LEFT + i * slot:.2f}", TOP, f"{slot:.2f}", PLOT_H, text))
    return format_html('<g class="hits">{}</g>', format_html_join(
        "", '<rect x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>', cols))


@register.inclusion_tag("queueadmin/_charts.html", takes_context=True)
def overview_charts(context):
    """The overview's charts (every queue), at the range its URL asks for (an
    unknown one shows the default: the overview itself never fails on it)."""
    request = context.get("request")
    try:
        rng = charts.parse_range(request.GET.get("range") if request else None)
    except charts.BadRange:
        rng = charts.parse_range(None)
    queues = (context.get("ov") or {}).get("queues") or []
    return charts_context(None, rng, max((q.get("latency", 0.0) for q in queues), default=0.0))
