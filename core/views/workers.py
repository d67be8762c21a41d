"""Workers (live and recently dead; quiet or stop one) and queues (pause and resume)."""
from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from queueadmin.core import operations, queries
from queueadmin.core.audit import Actor

from .common import act_required, confirm, page, staff_required


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


WORKER_ASKS = {
    "quiet": ("Quiet worker", "takes nothing new from now on; the items it runs finish, and it stays alive, "
                              "shown as quiet, until it is stopped or restarted"),
    "stop": ("Stop worker", "takes nothing new, finishes the items it runs (or hands them back if they outlast "
                            "its grace) and exits; its pool does not start another in its place"),
}


@never_cache
@require_POST
@act_required
def worker_control(request):
    """Quiet or stop one worker process, after a confirmation that says what
    happens; the worker does it within about a heartbeat."""
    back = reverse("queueadmin:workers")
    command, wid = request.POST.get("command", ""), request.POST.get("worker", "")
    if command not in WORKER_ASKS:
        messages.error(request, "Unknown action: a worker can be quieted or stopped.")
        return redirect(back)
    worker = next((w for w in queries.workers() if w["id"] == wid and w["live"]), None)
    if worker is None:
        messages.error(request, "No live worker by that name: it may have stopped meanwhile.")
        return redirect(back)
    title, what = WORKER_ASKS[command]
    label = f"{worker['label']} (host {worker['host']}, pid {worker['pid']})"
    if request.POST.get("confirm") != "1":
        running = len(worker["current"])
        return confirm(request, title=title, count=None, danger=command == "stop",
                       text=f"{title.split()[0]} worker {label}? It {what}. It runs {running} item"
                            f"{'s' if running != 1 else ''} now.",
                       action_url=reverse("queueadmin:worker_control"),
                       fields=[("command", command), ("worker", wid)], back_url=back, section="workers")
    if operations.control_worker(wid, command, actor=Actor.dashboard(request.user)):
        messages.success(request, f"Asked worker {label} to {command}: it does so within about a second.")
    else:
        messages.error(request, "No live worker by that name: it may have stopped meanwhile.")
    return redirect(back)


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
