"""The dashboard, the JSON API and /metrics, mounted with one include():

    path("queues/", include("queueadmin.urls"))

URL names live in the ``queueadmin`` namespace (``reverse("queueadmin:overview")``).
The standalone service mounts it at the site root (queueadmin/root_urls.py).
"""
from django.urls import path, re_path

from queueadmin.core import health, metrics
from queueadmin.core.api import app
from queueadmin.core.views import dead, inflight, item, overview, requests, scheduled, submit, workers
from queueadmin.core.live import routing as live
from queueadmin.core.views import bulk as bulk_views, clear as clear_views  # bulk jobs by filter (issue 22)
from queueadmin.core.views import recent  # the overview's running and recently finished requests (issue 22)
from queueadmin.core.views import queue_page  # a queue's page and the history charts (issue 22)
from queueadmin.core.views import activity  # the audit log (issue 22)

app_name = "queueadmin"

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),  # liveness: no I/O
    path("readyz", health.readyz, name="readyz"),  # readiness: Redis and the database answer
    path("", overview.overview, name="overview"),
    path("overview/requests/", recent.overview_requests, name="overview_requests"),
    path("submit/", submit.submit, name="submit"),
    path("requests/", requests.request_list, name="requests"),
    path("requests/bulk/", requests.request_bulk, name="request_bulk"),
    path("requests/<str:rid>/", requests.request_detail, name="request_detail"),
    path("requests/<str:rid>/results.jsonl", requests.request_results, name="request_results"),
    path("requests/<str:rid>/cancel/", requests.request_cancel, name="request_cancel"),
    path("requests/<str:rid>/priority/", requests.request_priority, name="request_priority"),
    path("requests/<str:rid>/concurrency/", requests.request_concurrency, name="request_concurrency"),
    path("requests/<str:rid>/retry/", requests.request_retry, name="request_retry"),
    path("requests/<str:rid>/items/<str:index>/", item.item_detail, name="item_detail"),
    path("inflight/", inflight.inflight, name="inflight"),
    path("inflight/requeue/", inflight.inflight_requeue, name="inflight_requeue"),
    path("inflight/stop/", inflight.inflight_stop, name="inflight_stop"),
    path("dead/", dead.dead, name="dead"),
    path("dead/action/", dead.dead_action, name="dead_action"),
    path("bulk/<str:jid>/", bulk_views.bulk_progress, name="bulk_progress"),
    path("scheduled/", scheduled.scheduled, name="scheduled"),
    path("scheduled/action/", scheduled.scheduled_action, name="scheduled_action"),
    path("workers/", workers.workers, name="workers"),
    path("workers/control/", workers.worker_control, name="worker_control"),
    path("queues/", workers.queues, name="queues"),
    path("queues/<str:name>/pause/", workers.queue_pause, name="queue_pause"),
    path("queues/<str:name>/clear/", clear_views.queue_clear, name="queue_clear"),
    path("queues/<str:name>/", queue_page.queue_detail, name="queue_detail"),
    path("queues/<str:name>/charts/", queue_page.queue_charts, name="queue_charts"),
    path("charts/", queue_page.overview_charts, name="charts"),
    path("activity/", activity.activity_list, name="activity"),
    path("ws/live/", live.websocket_only, name="live"),  # the live pages' WebSocket (queueadmin.asgi)
    # the JSON API: /api/v1/..., today's /api/..., /api/openapi.json, /api/docs
    path("api/docs/assets/<str:name>", app.docs_asset, name="api_docs_asset"),
    path("api/", app.urlpatterns()),
    re_path(r"^api(?:/.*)?$", app.not_found, name="api_not_found"),  # JSON 404 for the rest of /api
    path("metrics", metrics.metrics_view, name="metrics"),
]
