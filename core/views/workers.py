"""Workers (live and recently dead) and queues (pause and resume)."""
from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from queueadmin.core import operations, queries
from queueadmin.core.audit import Actor

from .common import act_required, page, staff_required


def workers_context(params=None) -> dict:
    rows = queries.workers(include_recovered=True)
    return {"rows": rows, "live_count": sum(1 for w in rows if w["live"]),
            "dead_count": sum(1 for w in rows if w["dead"]),
            "running_count": sum(len(w["current"]) for w in rows),
            "over_count": sum(w["over_limit"] for w in rows), "live_topic": "workers"}


@never_cache
@require_GET
@staff_required
def workers(request):
    return page(request, "queueadmin/workers.html", workers_context(), "workers")


def queues_context(params=None) -> dict:
    data = queries.overview()
    return {"queues": data["queues"], "live_topic": "queues"}


@never_cache
@require_GET
@staff_required
def queues(request):
    return page(request, "queueadmin/queues.html", queues_context(), "queues")


@never_cache
@require_POST
@act_required
def queue_pause(request, name):
    back = reverse("queueadmin:queues")
    if name not in queries.queue_names():
        messages.error(request, "Unknown queue.")
        return redirect(back)
    paused = request.POST.get("paused") == "1"
    operations.set_paused(name, paused, actor=Actor.dashboard(request.user))
    messages.success(request, f"Queue {name} {'paused: workers take nothing new from it' if paused else 'resumed'}.")
    return redirect(request.POST.get("next") if request.POST.get("next") in (reverse("queueadmin:overview"), back) else back)
