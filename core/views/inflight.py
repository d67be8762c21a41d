"""In flight / stuck: items delivered and not yet acknowledged. Stuck = lease
expired or worker dead; requeue one, a selection, or every stuck item."""
from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from core import queries

from . import ops
from .common import act_required, confirm, page, selected_pairs, staff_required

PAGE_SIZE = 100


def _filters(params) -> tuple[str | None, bool]:
    queue = params.get("queue") or None
    if queue and queue not in queries.queue_names():
        queue = None
    return queue, params.get("stuck") == "1"


def inflight_context(params) -> dict:
    queue, stuck_only = _filters(params)
    rows = queries.inflight(queue)
    stuck = sum(1 for r in rows if r["stuck"])
    shown = [r for r in rows if r["stuck"]] if stuck_only else rows
    pg = queries.Page.of(params.get("page"), len(shown), PAGE_SIZE)
    q = params.copy()
    q.pop("page", None)
    return {"rows": pg.slice(shown), "pg": pg, "count": len(rows), "stuck_count": stuck, "queue": queue or "",
            "stuck_only": stuck_only, "queues": queries.queue_names(), "filter_qs": q.urlencode(),
            "live_topic": f"inflight:{queue or ''}:{int(stuck_only)}:{pg.number}"}


@never_cache
@require_GET
@staff_required
def inflight(request):
    return page(request, "qa/inflight.html", inflight_context(request.GET), "inflight")


@never_cache
@require_POST
@act_required
def inflight_requeue(request):
    from django.http import QueryDict

    filt = request.POST.get("filter", "")
    back = reverse("inflight") + (f"?{filt}" if filt else "")
    scope = request.POST.get("scope", "selected")
    if scope == "stuck":
        queue, _ = _filters(QueryDict(filt))
        pairs = [(r["request"], r["entry"]) for r in queries.inflight(queue) if r["stuck"]]
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
                       action_url=reverse("inflight_requeue"),
                       fields=[("scope", scope), ("filter", filt)] + (
                           [("ids", f"{r}:{e}") for r, e in pairs] if scope != "stuck" else []),
                       back_url=back, section="inflight")
    n = ops.requeue(pairs)
    messages.success(request, f"Requeued {n:,} item{'s' if n != 1 else ''}." if n else
                     "Nothing was requeued: those items finished meanwhile.")
    return redirect(back)
