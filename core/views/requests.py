"""Requests: the history list (from the database, live rows overlaid from
Redis) and one request's page with its items and actions."""
from __future__ import annotations

import itertools

from django.contrib import messages
from django.http import Http404, QueryDict, StreamingHttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from queueadmin.core import bulk_operations, operations, queries, retention
from queueadmin.core.audit import Actor
from queueadmin.core.webhooks import deliveries
from queueadmin.core.engine.client.queue_client import QueueError
from queueadmin.core.engine.config import MAX_CONCURRENCY
from queueadmin.core.engine.client.reads import result_json
from queueadmin.core.forms import RequestFilterForm
from queueadmin.core.models import RequestRecord
from queueadmin.core.queries import unrunnable

from .bulk import after_start
from .common import RID, act_required, check_rid, confirm, page, parse_int, staff_required

PAGE_SIZE = 50
LIVE = queries.LIVE_STATES


def _filtered(request):
    form = RequestFilterForm(request.GET or None, queues=queries.queue_names())
    return form, form.filter(RequestRecord.objects.all())


def list_context(request) -> dict:
    form, qs = _filtered(request)
    pg = queries.Page.of(request.GET.get("page"), qs.count(), PAGE_SIZE)
    rows = queries.overlay(list(qs[pg.start:pg.stop]))
    params = request.GET.copy()
    params.pop("page", None)
    live_ids = [row["id"] for row in rows if row["state"] in LIVE]
    return {"form": form, "rows": rows, "pg": pg, "filter_qs": params.urlencode(),
            "live_topic": "rows:" + ",".join(live_ids) if live_ids else "", "filter_errors": form.errors,
            "history_kept": retention.describe()}


@never_cache
@require_GET
@staff_required
def request_list(request):
    return page(request, "queueadmin/requests.html", list_context(request), "requests")


@never_cache
@require_POST
@act_required
def request_bulk(request):
    """Cancel the selected requests, or every live one matching the filter
    (a bulk job of batches of 500, whose progress the bulk job page shows)."""
    back = reverse("queueadmin:requests") + ("?" + request.POST.get("filter", "") if request.POST.get("filter") else "")
    scope = request.POST.get("scope", "selected")
    if scope == "all":
        return _cancel_all(request, back)
    ids = [i for i in request.POST.getlist("ids") if RID.match(i)]
    if not ids:
        messages.info(request, "Nothing selected: tick some rows first.")
        return redirect(back)
    if request.POST.get("confirm") != "1":
        return confirm(request, title="Cancel requests", count=len(ids), danger=True, text=_cancel_text(len(ids)),
                       action_url=reverse("queueadmin:request_bulk"), back_url=back, section="requests",
                       fields=[("scope", scope), ("filter", request.POST.get("filter", ""))] + [("ids", i) for i in ids])
    done = failed = 0
    who = Actor.dashboard(request.user)
    for rid in ids:
        try:
            operations.cancel(rid, actor=who)
            done += 1
        except QueueError:
            failed += 1
    messages.success(request, f"Cancelled {done:,} request{'s' if done != 1 else ''}."
                     + (f" {failed:,} had already finished." if failed else ""))
    return redirect(back)


def _cancel_all(request, back: str):
    filt = request.POST.get("filter", "")
    form = RequestFilterForm(QueryDict(filt), queues=queries.queue_names())
    if form.is_bound and not form.is_valid():
        messages.error(request, "The filter is not valid: fix it before acting on what it matches.")
        return redirect(back)
    qs = form.filter(RequestRecord.objects.filter(state__in=LIVE))
    n = qs.count()
    if not n:
        messages.info(request, "No live request matches this filter.")
        return redirect(back)
    if request.POST.get("confirm") != "1":
        return confirm(request, title="Cancel all matching", count=n, danger=True,
                       text=_cancel_text(n) + " All live requests that match this filter, in batches of 500.",
                       action_url=reverse("queueadmin:request_bulk"), fields=[("scope", "all"), ("filter", filt)],
                       back_url=back, section="requests")
    ids = qs.order_by("id").values_list("id", flat=True).iterator(chunk_size=2000)  # never all in memory
    jid = bulk_operations.bulk_cancel(ids, expected=n, label="cancel requests", actor=Actor.dashboard(request.user))
    return after_start(request, jid, back, "Cancelled {done} request(s).")


def _cancel_text(n: int) -> str:
    return (f"Cancel {n:,} request{'s' if n != 1 else ''}? Items not yet started will never run; items in flight "
            f"are stopped within about a second.")


def detail_context(request, rid: str, after: str | None = None, before: str | None = None) -> dict | None:
    """`after`/`before` are item cursors as given (a bad one shows the first page)."""
    after, before = queries.entry_cursor(after, end_ok=True), queries.entry_cursor(before)
    st = queries.request_view(rid)
    if st is None:
        return None
    items = queries.request_items(rid, after=after, before=before) if st.get("in_redis") else None
    rec = RequestRecord.objects.filter(id=rid).only("items_preview", "submitted_by").first()
    cursor = f"{after or ''}:{before or ''}"
    return {"st": st, "rid": rid, "items": items, "record": rec, "after": after or "", "before": before or "",
            "webhooks": deliveries.for_request(rid), "waiting_for": unrunnable.for_request(st),
            "live_topic": f"request:{rid}:{cursor}" if st.get("in_redis") else "",
            "max_concurrency": MAX_CONCURRENCY}


@never_cache
@require_GET
@staff_required
def request_detail(request, rid):
    check_rid(rid)
    ctx = detail_context(request, rid, request.GET.get("after"), request.GET.get("before"))
    if ctx is None:
        return page(request, "queueadmin/not_found.html", {"what": "request", "rid": rid}, "requests", status=404)
    return page(request, "queueadmin/request.html", ctx, "requests")


@never_cache
@require_GET
@staff_required
def request_results(request, rid):
    """All results as JSON Lines (the records of `queue_results`)."""
    check_rid(rid)
    try:
        records = queries.results_iter(rid)
        first = next(records, None)
    except QueueError:
        raise Http404("this request's results are no longer in Redis (past the queue's retention)")

    def chunks():
        """Streamed as the records are read (1,000 at a time), in pieces of
        about 64 KB: memory stays flat whatever the request's size."""
        buf, size = [], 0
        for rec in itertools.chain([first] if first is not None else [], records):
            line = result_json(rec, compact=False) + "\n"  # standard JSON, whatever is stored
            buf.append(line)
            size += len(line)
            if size >= 65536:
                yield "".join(buf)
                buf, size = [], 0
        if buf:
            yield "".join(buf)

    response = StreamingHttpResponse(chunks(), content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="request-{rid}.jsonl"'
    return response


def _back(rid):
    return redirect(reverse("queueadmin:request_detail", args=[rid]))


@never_cache
@require_POST
@act_required
def request_cancel(request, rid):
    check_rid(rid)
    if request.POST.get("confirm") != "1":
        st = queries.status(rid) or {}
        left = max(0, st.get("total", 0) - st.get("done", 0) - st.get("failed", 0) - st.get("expired", 0))
        return confirm(request, title="Cancel request", count=left, danger=True,
                       text=f"Cancel request {rid}? {left:,} item{'s' if left != 1 else ''} not finished yet "
                            f"will not run: items not yet started never start, and items running now are "
                            f"stopped within about a second (recorded as cancelled). Finished items keep "
                            f"their results.",
                       action_url=reverse("queueadmin:request_cancel", args=[rid]), fields=[],
                       back_url=reverse("queueadmin:request_detail", args=[rid]), section="requests")
    try:
        operations.cancel(rid, actor=Actor.dashboard(request.user))
        messages.success(request, "Request cancelled.")
    except QueueError as exc:
        messages.error(request, f"Cannot cancel: {exc}.")
    return _back(rid)


@never_cache
@require_POST
@act_required
def request_priority(request, rid):
    check_rid(rid)
    value = parse_int(request, request.POST.get("priority"), "Priority", 0, 99)
    if value is not None:
        try:
            operations.set_priority(rid, value, actor=Actor.dashboard(request.user))
            messages.success(request, f"Priority set to {value}.")
        except QueueError as exc:
            messages.error(request, f"Cannot change the priority: {exc}.")
    return _back(rid)


@never_cache
@require_POST
@act_required
def request_concurrency(request, rid):
    check_rid(rid)
    value = parse_int(request, request.POST.get("concurrency"), "Concurrency limit", 1, MAX_CONCURRENCY)
    if value is not None:
        try:
            operations.set_concurrency(rid, value, actor=Actor.dashboard(request.user))
            messages.success(request, f"Concurrency limit set to {value}.")
        except QueueError as exc:
            messages.error(request, f"Cannot change the concurrency limit: {exc}.")
    return _back(rid)


@never_cache
@require_POST
@act_required
def request_retry(request, rid):
    check_rid(rid)
    try:
        n = operations.retry_dead(rid, actor=Actor.dashboard(request.user))
    except QueueError as exc:
        messages.error(request, f"Cannot retry: {exc}.")
    else:
        if n:
            messages.success(request, f"Sent {n:,} failed item{'s' if n != 1 else ''} back to run again.")
        else:
            messages.info(request, "No failed items to retry.")
    return _back(rid)
