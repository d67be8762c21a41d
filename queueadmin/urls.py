from django.contrib import admin
from django.urls import include, path

from core import health
from core.views import dead, inflight, overview, requests, scheduled, submit, workers

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("healthz", health.healthz, name="healthz"),  # liveness: no I/O
    path("readyz", health.readyz, name="readyz"),  # readiness: Redis and the database answer
    path("", overview.overview, name="overview"),
    path("submit/", submit.submit, name="submit"),
    path("requests/", requests.request_list, name="requests"),
    path("requests/bulk/", requests.request_bulk, name="request_bulk"),
    path("requests/<str:rid>/", requests.request_detail, name="request_detail"),
    path("requests/<str:rid>/results.jsonl", requests.request_results, name="request_results"),
    path("requests/<str:rid>/cancel/", requests.request_cancel, name="request_cancel"),
    path("requests/<str:rid>/priority/", requests.request_priority, name="request_priority"),
    path("requests/<str:rid>/concurrency/", requests.request_concurrency, name="request_concurrency"),
    path("requests/<str:rid>/retry/", requests.request_retry, name="request_retry"),
    path("inflight/", inflight.inflight, name="inflight"),
    path("inflight/requeue/", inflight.inflight_requeue, name="inflight_requeue"),
    path("inflight/stop/", inflight.inflight_stop, name="inflight_stop"),
    path("dead/", dead.dead, name="dead"),
    path("dead/action/", dead.dead_action, name="dead_action"),
    path("scheduled/", scheduled.scheduled, name="scheduled"),
    path("scheduled/action/", scheduled.scheduled_action, name="scheduled_action"),
    path("workers/", workers.workers, name="workers"),
    path("queues/", workers.queues, name="queues"),
    path("queues/<str:name>/pause/", workers.queue_pause, name="queue_pause"),
]

# The JSON API and /metrics live in core.api_urls (owned by the API module);
# the dashboard works without them.
try:
    import core.api_urls  # noqa: F401
except ImportError:
    pass
else:
    urlpatterns.append(path("", include("core.api_urls")))
