"""Redis in trouble (down, silent, out of memory, read-only, loading) is an
outage, not a bug: a dashboard page that meets it answers 503 with one clear
sentence (core.engine.errors.describe) instead of a 500. htmx requests get the
page's fragment, retargeted to the main area; JSON clients get JSON. The JSON
API handles its own errors before they reach this."""
from __future__ import annotations

import logging

import redis
from django.http import JsonResponse
from django.shortcuts import render

from queueadmin.core.auth import can_act
from queueadmin.core.engine.errors import describe, trouble
from queueadmin.core.views.common import NAV

log = logging.getLogger("queueadmin.dashboard")

RETRY_AFTER = "5"  # seconds: most trouble (a failover, loading, a full Redis) lasts longer, but clients poll


class RedisTroubleMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exc):
        if not isinstance(exc, redis.RedisError):
            return None
        message = describe(exc)
        if trouble(exc):
            log.warning("%s %s: %s", request.method, request.path, message)
        else:  # an unexpected Redis reply: still no 500 page, but worth a traceback
            log.exception("%s %s: %s", request.method, request.path, message)
        if not request.accepts("text/html"):
            response = JsonResponse({"error": message}, status=503)
        else:
            response = self.page(request, message)
        response["Retry-After"] = RETRY_AFTER
        return response

    @staticmethod
    def page(request, message: str):
        htmx = getattr(request, "htmx", False)
        fragment = htmx and not htmx.boosted
        template = "queueadmin/unavailable_body.html" if fragment else "queueadmin/unavailable.html"
        try:
            acts = can_act(request.user)
        except Exception:  # the database may be in trouble too: the page still renders
            acts = False
        response = render(request, template, {"message": message, "can_act": acts, "nav": NAV}, status=503)
        if fragment:  # replace the page's main area, whatever element asked
            response["HX-Retarget"] = "#main"
            response["HX-Reswap"] = "innerHTML"
        return response
