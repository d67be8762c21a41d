"""A topic's fragment, rendered without a request (once per topic for
every socket watching it, core/live/relay.py), in two variants: with action
buttons for staff who may act, without for view-only staff. Forms inside
them post through htmx, which sends the CSRF token as a header. Each page's
context comes from its view module, as the page itself gets it."""
from __future__ import annotations

from django.http import QueryDict
from django.template.loader import render_to_string

from queueadmin.core import queries
from queueadmin.core.models import RequestRecord
from queueadmin.core.views import dead, inflight, overview, requests, scheduled, workers


def render_topic(topic: str, can_act: bool) -> str:
    kind, _, rest = topic.partition(":")
    base = {"can_act": can_act, "live": True}
    if kind == "overview":
        return render_to_string("queueadmin/overview_live.html", {**base, **overview.overview_context()})
    if kind == "request":
        rid, _, cursor = rest.partition(":")
        after, _, before = cursor.partition(":")
        ctx = requests.detail_context(None, rid, after or None, before or None)
        if ctx is None:
            return ""
        return render_to_string("queueadmin/request_live.html", {**base, **ctx})
    if kind == "rows":
        ids = rest.split(",")
        records = list(RequestRecord.objects.filter(id__in=ids))
        order = {rid: i for i, rid in enumerate(ids)}
        records.sort(key=lambda r: order.get(r.id, 0))
        return render_to_string("queueadmin/request_rows.html", {**base, "rows": queries.overlay(records)})
    if kind == "inflight":
        queue, stuck, pg = (rest.split(":") + ["", "", ""])[:3]
        params = QueryDict(mutable=True)
        params.update({"queue": queue, "stuck": stuck if stuck == "1" else "", "page": pg or "1"})
        return render_to_string("queueadmin/inflight_live.html", {**base, **inflight.inflight_context(params)})
    if kind == "dead":
        queue, rid, pg = (rest.split(":") + ["", "", ""])[:3]
        params = QueryDict(mutable=True)
        params.update({"queue": queue, "request": rid, "page": pg or "1"})
        return render_to_string("queueadmin/dead_live.html", {**base, **dead.dead_context(params)})
    if kind == "scheduled":
        params = QueryDict(mutable=True)
        params["page"] = rest or "1"
        return render_to_string("queueadmin/scheduled_live.html", {**base, **scheduled.scheduled_context(params)})
    if kind == "workers":
        return render_to_string("queueadmin/workers_live.html", {**base, **workers.workers_context()})
    if kind == "queues":
        return render_to_string("queueadmin/queues_live.html", {**base, **workers.queues_context()})
    return ""
