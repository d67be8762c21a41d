"""System checks (`manage.py check`): each processor must import, each name
must mean one function, and an async processor needs a worker that runs them
on its event loop; Redis must be named; SQLite needs the options that history
writes from several processes need; secrets several machines share must not
be generated on one of them."""
from __future__ import annotations

import inspect
from urllib.parse import urlsplit

from django.conf import settings
from django.core import checks

from queueadmin.core import conf
from queueadmin.core.catalog import clashes
from queueadmin.core.engine.runtime.processors import ProcessorError, import_path


def async_supported() -> bool:
    """Whether this engine's workers await `async def` processors (the
    runtime with an event loop, core/engine/runtime/executor.py)."""
    from queueadmin.core.engine.runtime import worker  # loaded when the check runs, not with the app

    return bool(getattr(worker, "ASYNC_PROCESSORS", hasattr(worker, "Executor")))


@checks.register("queueadmin")
def check_processors(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    found: list[checks.CheckMessage] = []
    for name, path in sorted(conf.processors().items()):
        try:
            fn = import_path(path)
        except ProcessorError as exc:
            found.append(checks.Error(f"processor {name!r} cannot be imported: {exc}", obj=path,
                                      hint="Fix the dotted path in QUEUEADMIN['PROCESSORS'].", id="queueadmin.E001"))
            continue
        if not callable(fn):
            found.append(checks.Error(f"processor {name!r} ({path}) is not callable", obj=path,
                                      id="queueadmin.E001"))
        elif inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            found.append(checks.Error(f"processor {name!r} ({path}) is a generator; a processor returns "
                                      "one result per item", obj=path, id="queueadmin.E003"))
        elif inspect.iscoroutinefunction(fn) and not async_supported():
            # a warning, not an error: `migrate` and the web process still start
            found.append(checks.Warning(f"processor {name!r} ({path}) is async, and this engine's workers do "
                                        "not run async processors: its items would fail", obj=path,
                                        hint="Make it a plain function.", id="queueadmin.W003"))
    for name, paths in clashes().items():
        found.append(checks.Error(f"processor name {name!r} is given to {len(paths)} functions: {', '.join(paths)}",
                                  obj=name, hint="Give each @processor its own name; the first one registered "
                                                 "(or the settings map's) is the one that runs.",
                                  id="queueadmin.E002"))
    return found


@checks.register("queueadmin")
def check_redis_url(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    url = conf.redis_url()
    if not url:
        return [checks.Error("queueadmin has no Redis to use: REDIS_URL is not set",
                             hint="Set REDIS_URL in the settings or the environment, e.g. redis://127.0.0.1:6379/0.",
                             id="queueadmin.E010")]
    if urlsplit(url).scheme not in ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"):
        return [checks.Error(f"REDIS_URL {url.rpartition('@')[2]!r} is not a Redis URL",
                             hint="Use redis://host:port/db, rediss:// (TLS), unix:// or redis+cluster://.",
                             id="queueadmin.E011")]
    return []


# What the history writes from several worker processes need of SQLite: a busy
# timeout, and the write lock taken when a transaction begins (not upgraded
# later, which fails at once with "database is locked" under contention).
SQLITE_OPTIONS = {"timeout": 20, "transaction_mode": "IMMEDIATE",
                  "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}


@checks.register("queueadmin")
def check_sqlite_options(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    db = settings.DATABASES.get("default", {})
    if db.get("ENGINE") != "django.db.backends.sqlite3":
        return []
    options = db.get("OPTIONS", {})
    if float(options.get("timeout", 5)) >= 10 and str(options.get("transaction_mode", "")).upper() == "IMMEDIATE":
        return []
    return [checks.Warning(
        "SQLite without the options queueadmin's workers need: several processes writing request history "
        "get \"database is locked\"",
        hint=f"Add to DATABASES['default']: \"OPTIONS\": {SQLITE_OPTIONS!r}, or use PostgreSQL.",
        id="queueadmin.W010")]


@checks.register("queueadmin")
def check_shared_secrets(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """A secret generated on this machine cannot agree with the other machines'
    (the standalone service generates the ones not given in the environment
    and lists them in QUEUEADMIN_GENERATED_SECRETS)."""
    db = settings.DATABASES.get("default", {})
    if db.get("ENGINE") == "django.db.backends.sqlite3":
        return []  # one machine
    found = []
    for name, variable in (("WEBHOOK_SECRET", "QUEUEADMIN_WEBHOOK_SECRET"), ("SECRET_KEY", "DJANGO_SECRET_KEY")):
        if name in conf.generated_secrets():
            found.append(checks.Warning(
                f"{name} was generated on this machine, and this database is shared by several machines: "
                f"{'webhooks signed here fail verification against the others' if name == 'WEBHOOK_SECRET' else 'sessions and signatures made elsewhere are refused here'}",
                hint=f"Set {variable} to the same value on every machine (docs/operations.md).",
                id="queueadmin.W011"))
    return found


@checks.register("queueadmin")
def check_history_retention(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """HISTORY_RETENTION and HISTORY_PRUNE_SECONDS (core/retention.py): a bad
    value is said here, not found by a worker's pruning pass."""
    from queueadmin.core import retention

    found = []
    try:
        retention.policy()
    except retention.RetentionError as exc:
        found.append(checks.Error(
            str(exc), hint='Use None (keep for ever), days for every finished state (e.g. 30), or a dict such as '
                           '{"completed": 30, "failed": 90}; the states: ' + ", ".join(retention.FINISHED_STATES),
            id="queueadmin.E020"))
    try:
        retention.prune_every()
    except retention.RetentionError as exc:
        found.append(checks.Error(str(exc), hint="e.g. 3600 (hourly)", id="queueadmin.E021"))
    return found


@checks.register("queueadmin")
def check_encryption(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """ENCRYPTION_KEYS must be well-formed, and present when a queue encrypts
    (core/engine/features/encryption.py)."""
    from queueadmin.core.engine.features import encryption

    problem = encryption.problem()
    if problem.startswith("ENCRYPTION_KEYS"):
        return [checks.Error(problem, hint="Each key: 32 random bytes in base64 or hex (docs/configuration.md).",
                             id="queueadmin.E030")]
    if problem:
        try:
            from queueadmin.core.models import Queue

            encrypted = list(Queue.objects.filter(encrypt=True).values_list("name", flat=True))
        except Exception:  # no database yet (before migrate): nothing to say
            encrypted = []
        if encrypted:
            return [checks.Error(f"queue(s) {', '.join(encrypted)} encrypt their items, and no encryption key "
                                 "is configured: submissions to them are refused and their items cannot be read",
                                 hint="Set QUEUEADMIN[\"ENCRYPTION_KEYS\"] or QUEUEADMIN_ENCRYPTION_KEYS.",
                                 id="queueadmin.E031")]
    return []
