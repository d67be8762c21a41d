"""In flight / stuck: items delivered and not yet acknowledged. Stuck = lease
expired or worker dead; requeue one, a selection, or every stuck item; stop
one running item (its worker stops it and records a failed attempt)."""
from django.contrib import messages
from django.http import QueryDict
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from queueadmin.core import bulk_operations, operations, queries
from queueadmin.core.audit import Actor
from queueadmin.core.engine.client.queue_client import QueueError
from queueadmin.core.queries.inflight import item_label

from .bulk import after_start
from .common import act_required, confirm, page, selected_pairs, staff_required

PAGE_SIZE = 50


def _filters(params) -> tuple[str | None, bool]:
    queue = params.get("queue") or None
    if queue and queue not in queries.queue_names():
        queue = None
    return queue, params.get("stuck") == "1"


def inflight_context(params) -> dict:
    queue, stuck_only = _filters(params)
    found = queries.inflight_page(queue, stuck_only, params.get("page"), PAGE_SIZE)
    pg = found["pg"]
    q = params.copy()
    q.pop("page", None)
    return {"rows": found["rows"], "pg": pg, "count": found["count"], "stuck_count": found["stuck_count"],
            "over_count": sum(1 for r in found["rows"] if r["over_limit"]), "queue": queue or "",
            "sampled": found["sampled"], "sample": found["sample"],
            "stuck_only": stuck_only, "queues": queries.queue_names(), "filter_qs": q.urlencode(),
            "live_topic": f"inflight:{queue or ''}:{int(stuck_only)}:{pg.number}"}


@never_cache
@require_GET
@staff_required
def inflight(request):
    return page(request, "queueadmin/inflight.html", inflight_context(request.GET), "inflight")


@never_cache
@require_POST
@act_required
def inflight_requeue(request):
    filt = request.POST.get("filter", "")
    back = reverse("queueadmin:inflight") + (f"?{filt}" if filt else "")
    scope = request.POST.get("scope", "selected")
    if scope == "stuck":
        queue, _ = _filters(QueryDict(filt))
        pairs = queries.inflight_pairs(queue)
    else:
        pairs = selected_pairs(request.POST.getlist("ids"))
    if not pairs:
        messages.info(request, "Nothing to requeue." if scope == "stuck" else "Nothing selected: tick some rows.")
        return redirect(back)
    if scope != "one" and request.POST.get("confirm") != "1":
        what = "stuck item" if scope == "stuck" else "item"
        n = len(pairs)
        return confirm(request, title="Requeue items", count=n,
                       text=f"Requeue {n:,} {what}{'s' if n != 1 else ''}? They become due at once and the next "
                            f"worker runs them again (a dead worker's tokens are given back first).",
                       action_url=reverse("queueadmin:inflight_requeue"),
                       fields=[("scope", scope), ("filter", filt)] + (
                           [("ids", f"{r}:{e}") for r, e in pairs] if scope != "stuck" else []),
                       back_url=back, section="inflight")
    if scope == "stuck":  # every stuck item the filter matches: a bulk job of batches of 500
        jid = bulk_operations.bulk_requeue(pairs, label="requeue stuck items", actor=Actor.dashboard(request.user))
        return after_start(request, jid, back, "Requeued {done} item(s).")
    n = operations.requeue(pairs, actor=Actor.dashboard(request.user))
    messages.success(request, f"Requeued {n:,} item{'s' if n != 1 else ''}." if n else
                     "Nothing was requeued: those items finished meanwhile.")
    return redirect(back)


@never_cache
@require_POST
@act_required
def inflight_stop(request):
    """Stop one running item: the worker running it stops it within a few
    seconds and records the attempt as failed ("stopped by an operator"); the
    queue's retry policy applies."""
    filt = request.POST.get("filter", "")
    back = reverse("queueadmin:inflight") + (f"?{filt}" if filt else "")
    pairs = selected_pairs(request.POST.getlist("ids"))[:1]
    if not pairs:
        messages.info(request, "Nothing to stop.")
        return redirect(back)
    rid, entry = pairs[0]
    label = item_label(rid, entry)
    if request.POST.get("confirm") != "1":
        return confirm(request, title="Stop item", count=None, danger=True,
                       text=f"Stop item {label} of request {rid}? Its worker stops it within a few seconds; the "
                            f"attempt is recorded as failed (stopped by an operator) and retried if the queue's "
                            f"policy allows.",
                       action_url=reverse("queueadmin:inflight_stop"), fields=[("ids", f"{rid}:{entry}"), ("filter", filt)],
                       back_url=back, section="inflight")
    try:
        stopped = operations.stop_item(rid, entry, actor=Actor.dashboard(request.user))
    except QueueError as exc:
        messages.error(request, f"Cannot stop the item: {exc}.")
        return redirect(back)
    if stopped:
        messages.success(request, f"Stopping item {label} of {rid}: its worker stops it within a few seconds.")
    else:
        messages.info(request, "Nothing to stop: that item is not running any more.")
    return redirect(back)
