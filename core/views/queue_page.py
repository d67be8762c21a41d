"""A queue's page (/queues/<name>/): its figures, latency and history
charts; and the charts' partial (polled every few seconds, and fetched by
the range switch) for the overview and for a queue. Bad input is a 4xx:
an unknown range is 400, an unknown queue 404."""
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from queueadmin.core.queries import charts, queue_page as reads

from .common import page, staff_required


def charts_context(queue: str | None, rng: charts.Range, latency: float) -> dict:
    if queue:
        urls = reverse("queueadmin:queue_charts", args=[queue]), reverse("queueadmin:queue_detail", args=[queue])
    else:
        urls = reverse("queueadmin:charts"), reverse("queueadmin:overview")
    return {"ch": charts.history_charts(queue, rng, latency), "charts_url": urls[0], "page_url": urls[1]}


@never_cache
@require_GET
@staff_required
def queue_detail(request, name):
    data = reads.queue_page(name)
    if data is None:
        return page(request, "queueadmin/queue.html", {"missing": name}, "queues", status=404)
    status = 200
    try:
        rng = charts.parse_range(request.GET.get("range"))
    except charts.BadRange as exc:
        messages.error(request, f"{exc}; showing the last hour.")
        rng, status = charts.parse_range(None), 400
    ctx = {**data, **charts_context(name, rng, data["q"]["latency"])}
    return page(request, "queueadmin/queue.html", ctx, "queues", status=status)


@never_cache
@require_GET
@staff_required
def queue_charts(request, name):
    return _charts(request, name)


@never_cache
@require_GET
@staff_required
def overview_charts(request):
    return _charts(request, None)


def _charts(request, queue: str | None):
    try:
        rng = charts.parse_range(request.GET.get("range"))
    except charts.BadRange as exc:
        return HttpResponse(f"{exc}\n", status=400, content_type="text/plain; charset=utf-8")
    if queue is not None and queue not in charts.queue_names():
        return HttpResponse("no such queue\n", status=404, content_type="text/plain; charset=utf-8")
    return render(request, "queueadmin/_charts.html", charts_context(queue, rng, reads.latency_now(queue)))
