"""System checks (`manage.py check`) for the processors: each one must import,
each name must mean one function, and an async processor needs a worker that
runs them on its event loop."""
from __future__ import annotations

import inspect

from django.conf import settings
from django.core import checks

from core.catalog import clashes
from core.engine.processors import ProcessorError, import_path


def async_supported() -> bool:
    """Whether this engine's workers await `async def` processors (the
    runtime with an event loop, core/engine/executor.py)."""
    from core.engine import worker

    return bool(getattr(worker, "ASYNC_PROCESSORS", hasattr(worker, "Executor")))


@checks.register("queueadmin")
def check_processors(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    found: list[checks.CheckMessage] = []
    for name, path in sorted(settings.QUEUEADMIN["PROCESSORS"].items()):
        try:
            fn = import_path(path)
        except ProcessorError as exc:
            found.append(checks.Error(f"processor {name!r} cannot be imported: {exc}", obj=path,
                                      hint="Fix the dotted path in QUEUEADMIN['PROCESSORS'] "
                                           "(or QUEUEADMIN_EXTRA_PROCESSORS).", id="queueadmin.E001"))
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
