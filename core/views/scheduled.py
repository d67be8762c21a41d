"""Scheduled: delayed requests with their start time; run now or cancel."""
from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from core import queries
from core.engine.client import QueueError

from . import ops
from .common import RID, act_required, confirm, page, staff_required

PAGE_SIZE = 50


def scheduled_context(params) -> dict:
    rows = queries.scheduled()
    pg = queries.Page.of(params.get("page"), len(rows), PAGE_SIZE)
    return {"rows": pg.slice(rows), "pg": pg, "count": len(rows), "filter_qs": "",
            "live_topic": f"scheduled:{pg.number}"}


@never_cache
@require_GET
@staff_required
def scheduled(request):
    return page(request, "qa/scheduled.html", scheduled_context(request.GET), "scheduled")


@never_cache
@require_POST
@act_required
def scheduled_action(request):
    back = reverse("scheduled")
    action = request.POST.get("action")
    ids = [i for i in request.POST.getlist("ids") if RID.match(i)]
    if action not in ("run", "cancel"):
        messages.error(request, "Unknown action.")
        return redirect(back)
    if not ids:
        messages.info(request, "Nothing selected: tick some rows first.")
        return redirect(back)
    where = {row["request"]: row["queue"] for row in queries.scheduled()}
    n = len(ids)
    if (n > 1 or action == "cancel") and request.POST.get("confirm") != "1":
        text = (f"Start {n:,} scheduled request{'s' if n != 1 else ''} now?" if action == "run" else
                f"Cancel {n:,} scheduled request{'s' if n != 1 else ''}? Their items will never run.")
        return confirm(request, title="Run now" if action == "run" else "Cancel scheduled requests", count=n,
                       text=text, danger=action == "cancel", action_url=reverse("scheduled_action"),
                       fields=[("action", action)] + [("ids", i) for i in ids], back_url=back, section="scheduled")
    done = 0
    for rid in ids:
        try:
            if action == "run":
                done += 1 if rid in where and ops.run_now(where[rid], rid) else 0
            else:
                ops.cancel(rid)
                done += 1
        except QueueError:
            continue
    if action == "run":
        messages.success(request, f"{done:,} request{'s' if done != 1 else ''} will start within a second."
                         if done else "Nothing to start: those requests are no longer scheduled.")
    else:
        messages.success(request, f"Cancelled {done:,} request{'s' if done != 1 else ''}.")
    return redirect(back)
