"""Scheduled: delayed requests with their start time (run now or cancel), and
periodic requests with their next and last run (run now, pause, resume)."""
from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

import redis
from django.http import Http404

from queueadmin.core import operations, queries
from queueadmin.core.audit import Actor
from queueadmin.core.engine.client.queue_client import QueueError
from queueadmin.core.models import PeriodicRequest
from queueadmin.core.queries.scheduled import periodic as periodic_rows

from .common import RID, act_required, confirm, page, staff_required

PAGE_SIZE = 50


def scheduled_context(params) -> dict:
    rows = queries.scheduled()
    pg = queries.Page.of(params.get("page"), len(rows), PAGE_SIZE)
    return {"rows": pg.slice(rows), "pg": pg, "count": len(rows), "filter_qs": "",
            "live_topic": f"scheduled:{pg.number}", "periodic": periodic_rows()}


@never_cache
@require_GET
@staff_required
def scheduled(request):
    return page(request, "queueadmin/scheduled.html", scheduled_context(request.GET), "scheduled")


@never_cache
@require_POST
@act_required
def scheduled_action(request):
    back = reverse("queueadmin:scheduled")
    action = request.POST.get("action")
    if action in PERIODIC_ACTIONS:
        return periodic_action(request, action, back)
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
                       text=text, danger=action == "cancel", action_url=reverse("queueadmin:scheduled_action"),
                       fields=[("action", action)] + [("ids", i) for i in ids], back_url=back, section="scheduled")
    done, who = 0, Actor.dashboard(request.user)
    for rid in ids:
        try:
            if action == "run":
                done += 1 if rid in where and operations.run_now(where[rid], rid, actor=who) else 0
            else:
                operations.cancel(rid, actor=who)
                done += 1
        except QueueError:
            continue
    if action == "run":
        messages.success(request, f"{done:,} request{'s' if done != 1 else ''} will start within a second."
                         if done else "Nothing to start: those requests are no longer scheduled.")
    else:
        messages.success(request, f"Cancelled {done:,} request{'s' if done != 1 else ''}.")
    return redirect(back)


PERIODIC_ACTIONS = ("periodic_run", "periodic_pause", "periodic_resume")


def periodic_action(request, action: str, back: str):
    """Run a periodic request now, pause or resume it (the `periodic` field names it)."""
    try:
        obj = PeriodicRequest.objects.get(name=str(request.POST.get("periodic", ""))[:64])
    except PeriodicRequest.DoesNotExist:
        raise Http404("no such periodic request") from None
    try:
        if action == "periodic_run":
            rid = operations.run_periodic(obj, request.user, actor=Actor.dashboard(request.user))
            messages.success(request, f"{obj.name}: submitted request {rid}.")
        else:
            operations.set_periodic_enabled(obj, action == "periodic_resume", actor=Actor.dashboard(request.user))
            messages.success(request, f"{obj.name} {'resumed' if obj.enabled else 'paused'}.")
    except (QueueError, ValueError) as exc:
        messages.error(request, f"{obj.name}: {exc}")
    except redis.RedisError:
        messages.error(request, "Redis is unreachable: nothing was changed. Try again.")
    return redirect(back)
