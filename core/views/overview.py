"""Overview: every queue's depth by priority, in flight, scheduled, dead
letters, paused state and throughput; live workers. Updated live."""
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from queueadmin.core import queries

from .common import page, staff_required
from .recent import lists_context


def overview_context() -> dict:
    data = queries.overview()
    peak = max([d + f for d, f in data["throughput"]] or [0])
    last5 = data["throughput"][-5:]
    tp_5m = sum(d + f for d, f in last5)
    return {"ov": data, "tp_peak": peak, "tp_5m": tp_5m, "tp_rate": f"{tp_5m / 5:,.0f}"}


@never_cache
@require_GET
@staff_required
def overview(request):
    return page(request, "queueadmin/overview.html", {**overview_context(), **lists_context(), "live_topic": "overview"}, "overview")
