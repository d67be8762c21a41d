"""URLs of the JSON API (/api/...) and of /metrics; included at the site root."""
from django.urls import path, re_path

from . import metrics
from .api import app

urlpatterns = [
    path("api/", app.urlpatterns()),  # /api/v1/..., today's /api/..., /api/openapi.json, /api/docs
    path("metrics", metrics.metrics_view, name="metrics"),
    re_path(r"^api(?:/.*)?$", app.not_found),  # JSON 404 for the rest of /api
]
