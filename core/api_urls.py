"""URLs of the JSON API (/api/...) and of /metrics; included at the site root."""
from django.urls import path, re_path

from . import api, metrics

urlpatterns = [
    path("api/requests", api.submit, name="api-submit"),
    path("api/requests/<str:rid>", api.request_status, name="api-request"),
    path("api/requests/<str:rid>/results", api.request_results, name="api-results"),
    path("api/requests/<str:rid>/cancel", api.cancel, name="api-cancel"),
    path("api/requests/<str:rid>/priority", api.priority, name="api-priority"),
    path("api/requests/<str:rid>/concurrency", api.concurrency, name="api-concurrency"),
    path("api/queues", api.queues, name="api-queues"),
    path("metrics", metrics.metrics_view, name="metrics"),
    re_path(r"^api(?:/.*)?$", api.not_found),  # JSON 404 for the rest of /api
]
