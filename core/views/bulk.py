"""A bulk job's progress, for the panel the dead letters, requests, in-flight
and queues pages show after "act on all that match": htmx polls it each
second until the job is over (a job whose runner is gone runs on: see
operations.bulk_progress); the whole page otherwise."""
import re
from urllib.parse import urlsplit

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django_htmx.http import HttpResponseLocation
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from queueadmin.core import bulk_operations, queries

from .common import page, staff_required

JOB_ID = re.compile(r"^[0-9a-f]{11,20}$")  # client/bulk.py new_id

SECTIONS = {"dead": "dead", "inflight": "inflight", "requests": "requests", "clear": "queues"}  # the nav's highlight


@never_cache
@require_GET
@staff_required
def bulk_progress(request, jid):
    job = queries.job_view(bulk_operations.bulk_progress(jid)) if JOB_ID.match(jid) else None
    if job is None:
        raise Http404("no such bulk job (finished jobs are kept for a day)")
    if getattr(request, "htmx", False) and request.htmx.target == "bulk-progress":  # the panel polling itself
        if job["over"] and _on_dead_letters(request):  # the list under the panel changed: show it anew
            return HttpResponseLocation(request.htmx.current_url, target="#main")
        return render(request, "queueadmin/_bulk_progress.html", {"bulk": job})
    return page(request, "queueadmin/bulk.html", {"bulk": job}, SECTIONS.get(job["kind"], ""))


def _on_dead_letters(request) -> bool:
    return urlsplit(request.htmx.current_url or "").path == reverse("queueadmin:dead")


def after_start(request, jid: str, back: str, done_text: str):
    """Where a page goes once it started a bulk job: back, with the result,
    when the job is already over (it fitted one batch); else the job's page.
    `done_text`: the result, with {done} and {skipped} in it."""
    job = queries.job_view(bulk_operations.bulk_progress(jid))
    if job and job["over"] and job["state"] == "done":
        messages.success(request, done_text.format(done=f"{job['done']:,}", skipped=f"{job['skipped']:,}")
                         + (f" {job['skipped']:,} had changed meanwhile and were skipped." if job["skipped"] else ""))
        return go(request, back)
    return go(request, reverse("queueadmin:bulk_progress", args=[jid]))


def go(request, url: str):
    """To `url`: for htmx, fetched into the page's main area with the address
    bar following (HX-Location), so a job's page can be shared and reloaded."""
    if getattr(request, "htmx", False):
        return HttpResponseLocation(url, target="#main")
    return redirect(url)
