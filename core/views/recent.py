"""The overview's lists of running and recently finished requests, as a
partial that the overview includes and htmx refreshes every few seconds."""
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from queueadmin.core.queries.recent import running_and_recent

from .common import staff_required


def lists_context() -> dict:
    return {"lists": running_and_recent()}


@never_cache
@require_GET
@staff_required
def overview_requests(request):
    return render(request, "queueadmin/_overview_requests.html", lists_context())
