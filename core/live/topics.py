"""Live fragments: what the WebSocket pushes for each topic a page watches.

A topic names a page region and its parameters ("overview",
"request:<id>:<after>:<before>", "rows:<id>,<id>", "inflight:<queue>:<stuck>:<page>",
"dead:<queue>:<request>:<page>", "scheduled:<page>", "workers", "queues").
Fragments are rendered without a request (once per topic for every socket
watching it), in two variants: with action buttons for staff who may act,
without for view-only staff. Forms inside them post through htmx, which
sends the CSRF token as a header.
"""
from __future__ import annotations

from django.http import QueryDict
from django.template.loader import render_to_string

from queueadmin.core import queries
from queueadmin.core.models import RequestRecord

KINDS = ("overview", "request", "rows", "inflight", "dead", "scheduled", "workers", "queues")


def topic_exists(topic: str) -> bool:
    """Does a well-formed topic (core.sockets.topic_ok) name what exists: its
    queue, its request(s)? A topic naming nothing would cost renders of an
    empty region on every update. Raises if Redis or the database is away."""
    from queueadmin.core import services

    kind, _, rest = topic.partition(":")
    fields = rest.split(":")
    if kind in ("inflight", "dead") and fields[0] and fields[0] not in services.engine().queues():
        return False
    if kind == "request" or (kind == "dead" and fields[1]):
        return _requests_exist([fields[0] if kind == "request" else fields[1]])
    if kind == "rows":
        ids = rest.split(",")  # the list's live rows: rendered from their records
        return RequestRecord.objects.filter(id__in=ids).count() == len(ids)
    return True


def _requests_exist(ids: list[str]) -> bool:
    """Each id is a request Redis holds, or one in the history."""
    from queueadmin.core import services

    eng = services.engine()
    pipe = eng.redis.pipeline(transaction=False)
    for rid in ids:
        pipe.exists(eng.keys.request(rid).meta)
    missing = [rid for rid, n in zip(ids, pipe.execute()) if not n]
    return not missing or RequestRecord.objects.filter(id__in=missing).count() == len(missing)


def request_ids(topic: str) -> set[str] | None:
    """The requests whose events change this topic (None: any event does)."""
    kind, _, rest = topic.partition(":")
    if kind == "request":
        return {rest.partition(":")[0]}
    if kind == "rows":
        return set(rest.split(","))
    if kind in ("workers",):
        return set()  # heartbeats, not request events: refreshed on a timer
    return None


# Topics refreshed on a timer too (ages, heartbeats, throughput move without events).
PERIODIC = {"overview": 2.0, "inflight": 2.0, "workers": 2.0, "queues": 5.0, "scheduled": 5.0, "dead": 10.0,
            "request": 5.0}


def period(topic: str) -> float | None:
    return PERIODIC.get(topic.partition(":")[0])


def render_topic(topic: str, can_act: bool) -> str:
    kind, _, rest = topic.partition(":")
    base = {"can_act": can_act, "live": True}
    if kind == "overview":
        from queueadmin.core.views.overview import overview_context

        return render_to_string("queueadmin/overview_live.html", {**base, **overview_context()})
    if kind == "request":
        from queueadmin.core.views.requests import detail_context

        rid, _, cursor = rest.partition(":")
        after, _, before = cursor.partition(":")
        ctx = detail_context(None, rid, after or None, before or None)
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
        from queueadmin.core.views.inflight import inflight_context

        queue, stuck, pg = (rest.split(":") + ["", "", ""])[:3]
        params = QueryDict(mutable=True)
        params.update({"queue": queue, "stuck": stuck if stuck == "1" else "", "page": pg or "1"})
        return render_to_string("queueadmin/inflight_live.html", {**base, **inflight_context(params)})
    if kind == "dead":
        from queueadmin.core.views.dead import dead_context

        queue, rid, pg = (rest.split(":") + ["", "", ""])[:3]
        params = QueryDict(mutable=True)
        params.update({"queue": queue, "request": rid, "page": pg or "1"})
        return render_to_string("queueadmin/dead_live.html", {**base, **dead_context(params)})
    if kind == "scheduled":
        from queueadmin.core.views.scheduled import scheduled_context

        params = QueryDict(mutable=True)
        params["page"] = rest or "1"
        return render_to_string("queueadmin/scheduled_live.html", {**base, **scheduled_context(params)})
    if kind == "workers":
        from queueadmin.core.views.workers import workers_context

        return render_to_string("queueadmin/workers_live.html", {**base, **workers_context()})
    if kind == "queues":
        from queueadmin.core.views.workers import queues_context

        return render_to_string("queueadmin/queues_live.html", {**base, **queues_context()})
    return ""


def websocket_only(request):
    """The live pages' socket answers WebSocket handshakes only (queueadmin.asgi);
    this path is in the URLconf so that pages and the route share one name."""
    from django.http import HttpResponse

    response = HttpResponse("This address serves the dashboard's WebSocket only.\n", status=426,
                            content_type="text/plain")
    response["Upgrade"] = "websocket"
    return response
