"""queueadmin's settings: each one, its default and what it does, in one place.

A project sets only what it changes, in a ``QUEUEADMIN`` dict (and the Redis
URL as ``REDIS_URL``, in settings or the environment); everything else has
the default below. Every reader goes through this module: ``get(name)`` for
one value, ``redis_url()``, ``processors()``. Values are read at each use, so
a test (or ``override_settings``) that changes them is seen at once.

docs/configuration.md lists the same settings; tests/test_conf.py checks
that the two agree.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

MiB = 1024 * 1024


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    doc: str


SETTINGS = [
    Setting("PREFIX", "qa", "Prefix of every Redis key. Must be the same on every machine that shares a Redis."),
    Setting("PROCESSORS", {}, "More processors: name -> dotted path of a callable `payload -> result`. "
                              "Apps' `processors.py` with `@processor` add theirs too."),
    Setting("BUILTIN_PROCESSORS", True, "Offer the built-in processors (echo, uppercase, word_count, sha256, "
                                        "sleep, async_sleep, fail)."),
    Setting("AGING_SECONDS", None, "Lift a waiting request one priority level per this many seconds (None: off)."),
    Setting("HEARTBEAT_SECONDS", 1.0, "How often a worker says it is alive."),
    Setting("DEAD_AFTER_SECONDS", 10.0, "A worker silent this long is dead: its work is handed to others."),
    Setting("WAIT_REPLICAS", 0, "Wait for this many replicas to have each write round trip (0: off)."),
    Setting("WAIT_TIMEOUT_MS", 1000, "How long to wait for WAIT_REPLICAS."),
    Setting("OPENTELEMETRY", True, "Trace submissions and items' runs with OpenTelemetry when its API package "
                                   "is installed (the spans go to the TracerProvider the project configures); "
                                   "False: off (docs/operations.md, Tracing)."),
    Setting("API_MAX_BODY_BYTES", 64 * MiB, "Largest request body from a usable API token (413 above)."),
    Setting("API_ANON_MAX_BODY_BYTES", 16 * 1024, "Largest body sent without a usable token, refused unread."),
    Setting("API_BODY_BUDGET_BYTES", 64 * MiB, "Bytes of large bodies (over 1 MiB) a web process handles at "
                                                "once; more get 503 with Retry-After, unread (one alone always "
                                                "fits)."),
    Setting("API_SMALL_BODY_BYTES", 16 * 1024, "Largest body of a steering call (priority, concurrency)."),
    Setting("API_MAX_ITEMS", 1_000_000, "Items per submitted request."),
    Setting("API_MAX_ITEM_BYTES", 2 * MiB, "One item as JSON text, in UTF-8 bytes."),
    Setting("API_MAX_DEDUP_KEY_CHARS", 200, "Longest de-duplication key."),
    Setting("API_RATE_LIMIT", "6000/min", "Calls per API token: N/s, N/min, N/h or N/day; \"0\" turns it off."),
    Setting("METRICS_TOKEN", "", "A shared key a metrics scraper may send instead of an API token (empty: "
                                 "tokens with the metrics scope only)."),
    Setting("WEBHOOK_ALLOWED_HOSTS", [], "Hosts a callback_url may name (empty: any host with public addresses)."),
    Setting("WEBHOOK_SECRET", "", "Signs webhooks of requests submitted without a token. Must be the same on "
                                  "every machine (empty: SECRET_KEY, which then must be)."),
    Setting("WEBHOOK_BACKOFF_SECONDS", 10.0, "First retry delay of a failed webhook (doubling)."),
    Setting("WEBHOOK_BACKOFF_MAX_SECONDS", 3600.0, "Longest delay between a webhook's retries."),
    Setting("WEBHOOK_GIVE_UP_SECONDS", 86400.0, "A webhook not delivered within this is given up."),
    Setting("WEBHOOK_TIMEOUT_SECONDS", 5.0, "How long one webhook attempt may take in all: name lookup, "
                                            "connecting, sending, the answer's headers."),
    Setting("WEBHOOK_SENDERS", 8, "Webhook attempts a worker process makes at once, one per target (and as "
                                  "many more for targets whose last attempt timed out)."),
    Setting("WEBHOOK_POLL_SECONDS", 1.0, "How often a worker looks for webhooks due."),
    Setting("ENCRYPTION_KEYS", [], "Keys of encrypted queues (AES-256-GCM): 32 random bytes each, in base64 or hex, "
                                   "newest first; new data is sealed with the first, reads try each (also "
                                   "QUEUEADMIN_ENCRYPTION_KEYS, comma separated)."),
    Setting("UNRUNNABLE_SECONDS", 3600.0, "Default, per queue, of how long an item waits for a live worker that "
                                          "has its processor before it fails with that reason."),
    Setting("HISTORY_RETENTION", None, "Days the request history keeps finished requests: one number for "
                                       "every finished state, or a dict state -> days such as "
                                       "{\"completed\": 30, \"failed\": 90} (a state left out is kept); None: "
                                       "kept for ever."),
    Setting("HISTORY_PRUNE_SECONDS", 3600.0, "How often, at most, the workers prune the request history "
                                             "(one worker at a time), when HISTORY_RETENTION is set."),
    Setting("SENTRY", {}, "Sentry reporting, when the project has set sentry-sdk up: False turns it off; keys "
                          "report (\"final\": once per item whose attempts are exhausted, or \"every\": each "
                          "failed attempt), crons, dashboard_url, grouping, monitor_config "
                          "(docs/operations.md, Sentry)."),
]
DEFAULTS = {s.name: s.default for s in SETTINGS}

BUILTIN_PROCESSORS = {
    name: f"queueadmin.core.engine.runtime.processors.{name}"
    for name in ("echo", "uppercase", "word_count", "sha256", "sleep", "async_sleep", "fail")
}


def _settings(settings=None):
    if settings is None:
        from django.conf import settings  # Django's only when asked: the worker's fast path passes its own
    return settings


def get(name: str, settings=None) -> Any:
    """One setting's value: the project's, else the default. `settings` is
    Django's (the default) or a settings module read before Django is set up."""
    if name not in DEFAULTS:
        raise KeyError(f"queueadmin has no setting {name!r}")
    values = getattr(_settings(settings), "QUEUEADMIN", None) or {}
    if name == "METRICS_TOKEN" and not values.get(name):  # its name before 1.0, a setting of its own
        return getattr(_settings(settings), "QUEUEADMIN_METRICS_TOKEN", "") or ""
    return values.get(name, DEFAULTS[name])


def redis_url(settings=None) -> str | None:
    """REDIS_URL from the settings, else from the environment; None: not set."""
    return getattr(_settings(settings), "REDIS_URL", None) or os.environ.get("REDIS_URL") or None


def redis_cluster(settings=None) -> bool:
    found = getattr(_settings(settings), "REDIS_CLUSTER", None)
    if found is None:
        found = os.environ.get("REDIS_CLUSTER", "").lower() in ("1", "true", "yes")
    return bool(found)


def processors(settings=None) -> dict[str, str]:
    """Every processor this deployment offers, name -> dotted path: the
    built-in ones, the settings' and the apps' `@processor` functions (a name
    the settings give keeps their path; `manage.py check` reports clashes)."""
    from queueadmin.core.engine.runtime.processors import catalog, dotted_path  # the runtime only when asked

    found = dict(BUILTIN_PROCESSORS) if get("BUILTIN_PROCESSORS", settings) else {}
    found.update(get("PROCESSORS", settings) or {})
    for name, fn in catalog.functions.items():
        found.setdefault(name, dotted_path(fn))
    return found


def generated_secrets(settings=None) -> list[str]:
    """The secrets the standalone service generated on this machine because
    the environment gave none (its settings list them)."""
    return list(getattr(_settings(settings), "QUEUEADMIN_GENERATED_SECRETS", ()))


def values(settings=None) -> dict[str, Any]:
    """Every setting's value, with PROCESSORS the full map of `processors()`."""
    found = {name: get(name, settings) for name in DEFAULTS}
    found["PROCESSORS"] = processors(settings)
    return found
