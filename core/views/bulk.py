"""A bulk job's progress, for the panel the dead letters, requests, in-flight
and queues pages show after "act on all that match": htmx polls it each
second until the job is over (a job whose runner is gone runs on: see
operations.bulk_progress); the whole page otherwise."""
from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from queueadmin.core import operations, queries

from .common import page, staff_required
from .dead import JOB_ID

SECTIONS = {"dead": "dead", "inflight": "inflight", "requests": "requests", "clear": "queues"}  # the nav's highlight


@never_cache
@require_GET
@staff_required
def bulk_progress(request, jid):
    job = queries.job_view(operations.bulk_progress(jid)) if JOB_ID.match(jid) else None
    if job is None:
        raise Http404("no such bulk job (finished jobs are kept for a day)")
    if getattr(request, "htmx", False):
        return render(request, "queueadmin/_bulk_progress.html", {"bulk": job})
    return page(request, "queueadmin/bulk.html", {"bulk": job}, SECTIONS.get(job["kind"], ""))


def after_start(request, jid: str, back: str, done_text: str):
    """Where a page goes once it started a bulk job: back, with the result,
    when the job is already over (it fitted one batch); else the job's page.
    `done_text`: the result, with {done} and {skipped} in it."""
    job = queries.job_view(operations.bulk_progress(jid))
    if job and job["over"] and job["state"] == "done":
        messages.success(request, done_text.format(done=f"{job['done']:,}", skipped=f"{job['skipped']:,}")
                         + (f" {job['skipped']:,} had changed meanwhile and were skipped." if job["skipped"] else ""))
        return redirect(back)
    return redirect(reverse("queueadmin:bulk_progress", args=[jid]))
