"""The NinjaAPI: /api/v1/... (described in /api/openapi.json, browsable at
/api/docs with the assets ninja ships, served from our static files) and
today's unversioned /api/... paths (same operations, not in the schema).

`urlpatterns()` gives the URL patterns with two changes to ninja's: a wrong
method gets a JSON 405 (ninja's is an empty HTML-less page) and the API root
a JSON 404.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI, Router
from ninja.errors import ValidationError
from ninja.openapi.docs import Swagger

from . import errors, items, queues, requests, steering, workers
from .parsing import JsonParser
from . import bulk  # search and bulk actions by filter (issue 22)


class QueueadminAPI(NinjaAPI):
    def validation_error_from_error_contexts(self, error_contexts) -> ValidationError:
        """As ninja's, keeping each error's input (our messages name its type)."""
        found = []
        for context in error_contexts:
            model = context.model
            for e in context.pydantic_validation_error.errors(include_url=False, include_context=True):
                loc = (model.__ninja_param_source__,) + model.__ninja_flatten_map_reverse__.get(e["loc"], e["loc"])
                found.append({**e, "loc": loc})
        return ValidationError(found)


class LocalSwagger(Swagger):
    """Swagger UI served by queueadmin itself, whether or not "ninja" is an
    installed app (ninja would fall back to a CDN): templates/queueadmin/api_docs.html
    loads the assets ninja ships through `docs_asset` and has no inline
    script, only a JSON data block that ninja's swagger-ui-init.js reads
    (strict CSP)."""

    def render_page(self, request, api, **kwargs):
        config = {**self.settings, "url": self.get_openapi_url(api, kwargs)}
        # "</" cannot end the data block early: JSON allows "<\/" for "</"
        text = json.dumps(config).replace("</", "<\\/")
        return render(request, "queueadmin/api_docs.html", {"api": api, "swagger_settings": text})


api = QueueadminAPI(
    title="queueadmin API", version="1",
    description="Submit requests of items to queues, follow them, read their results and steer them. "
                "Every call takes `Authorization: Bearer <token>` with the scope the operation names. "
                "Errors are `{\"error\": \"...\", \"code\": \"...\"}`.",
    urls_namespace="queueadmin:api", parser=JsonParser(), docs=LocalSwagger(), docs_url="/docs", openapi_url="/openapi.json",
)
errors.install(api)

v1 = Router()
requests.mount(v1)
queues.mount(v1)
steering.mount(v1)
items.mount(v1)
workers.mount(v1)
bulk.mount(v1)
legacy = Router()
requests.mount(legacy, legacy=True)
queues.mount(legacy, legacy=True)
api.add_router("/v1", v1)
api.add_router("", legacy)


# The files of ninja's Swagger UI that the docs page loads, served from the installed ninja package
# (a project need not install "ninja" as an app, nor collect its static files).
DOCS_ASSETS = {"swagger-ui.css": "text/css", "swagger-ui-bundle.js": "text/javascript",
               "swagger-ui-init.js": "text/javascript", "favicon.png": "image/png"}


def docs_asset(request, name: str):
    kind = DOCS_ASSETS.get(name)
    if kind is None:
        raise Http404("no such asset")
    folder = Path(importlib.util.find_spec("ninja").submodule_search_locations[0]) / "static" / "ninja"
    response = HttpResponse((folder / name).read_bytes(), content_type=kind)  # small, and no sync iterator under ASGI
    response["Cache-Control"] = "public, max-age=86400"
    return response


@csrf_exempt
def not_found(request, *args, **kwargs):
    return errors.error_response(404, "not_found", f"no API endpoint at {request.path[:200]}")


def json_405(view):
    """Ninja answers a method no operation takes with a bare 405: say it in JSON."""

    def wrapper(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        if response.status_code == 405 and not isinstance(response, JsonResponse):
            allowed = response.get("Allow", "")
            response = errors.error_response(405, "method_not_allowed",
                                             f"method {request.method} not allowed here; use "
                                             f"{' or '.join(allowed.split(', '))}", {"Allow": allowed})
        return response

    wrapper.csrf_exempt = True
    return never_cache(wrapper)


def urlpatterns():
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if getattr(pattern, "name", None) == "api-root":
            pattern.callback = not_found
        elif getattr(pattern, "name", None) not in ("openapi-json", "openapi-view"):
            pattern.callback = json_405(pattern.callback)
    return patterns, app_name, namespace
