"""Probes for load balancers and orchestrators; unauthenticated and cheap.

* /healthz — liveness: the process is up and serving (no I/O at all).
* /readyz — readiness: Redis answers PING and the database answers a
  `SELECT 1`; 200, or 503 naming what failed (the error's class only: the
  endpoint is public).
"""
from __future__ import annotations

import logging

import redis
from django.db import DatabaseError, connection
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

from queueadmin.core import clients

log = logging.getLogger("queueadmin.health")


@csrf_exempt
@never_cache
@require_safe
def healthz(request):
    return HttpResponse("ok\n", content_type="text/plain; charset=utf-8")


def check_redis() -> str:
    try:
        clients.redis_client().ping()
        return "ok"
    except (redis.RedisError, OSError) as exc:
        log.warning("readyz: Redis: %s", exc)
        return f"error: {type(exc).__name__}"


def check_database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return "ok"
    except DatabaseError as exc:
        log.warning("readyz: database: %s", exc)
        return f"error: {type(exc).__name__}"


@csrf_exempt
@never_cache
@require_safe
def readyz(request):
    checks = {"redis": check_redis(), "database": check_database()}
    ready = all(v == "ok" for v in checks.values())
    return JsonResponse({"status": "ready" if ready else "unavailable", "checks": checks},
                        status=200 if ready else 503)
