"""Processors: named callables `payload -> result`, found by dotted path.

A processor may take a second argument, the item's context (`ItemContext`),
to learn its attempt number or extend its lease.

Besides the settings map (name -> dotted path), processors can be registered
in code: `@processor` puts a function in the process-wide `catalog`, and a
resolver registered for a name prefix (Django tasks: "task:") turns such
names into callables on demand. Nothing here knows Django.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import time
from typing import Any, Callable


class ProcessorError(LookupError):
    pass


def echo(item: Any) -> Any:
    return item


def uppercase(item: Any) -> str:
    return str(item).upper()


def word_count(item: Any) -> int:
    return len(str(item).split())


def sha256(item: Any) -> str:
    return hashlib.sha256(str(item).encode()).hexdigest()


def sleep(item: Any) -> float:
    seconds = float(item)
    if not 0 <= seconds <= 3600:
        raise ValueError("sleep takes a number of seconds between 0 and 3600")
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 0.05))  # in slices, so that a stop (time limit, cancel) lands at once
    return seconds


async def async_sleep(item: Any) -> float:
    """`sleep` on the worker's event loop: many run at once in one process."""
    import asyncio  # here: reading this catalog (commands, checks) need not import asyncio (about 40 ms)

    seconds = float(item)
    if not 0 <= seconds <= 3600:
        raise ValueError("async_sleep takes a number of seconds between 0 and 3600")
    await asyncio.sleep(seconds)
    return seconds


def fail(item: Any) -> Any:
    raise RuntimeError(f"fail processor always fails (item: {str(item)[:80]})")


def import_path(path: str) -> Callable:
    module, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ProcessorError(f"cannot import processor {path!r}: {exc}") from exc


def dotted_path(fn: Callable) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


MAX_NAME = 100  # a processor's name is stored with each request's history


class Catalog:
    """Processors registered in code: functions named by `@processor`, and
    resolvers for families of names (a prefix, and `name -> callable` that
    raises ProcessorError for a name it refuses). One per process (`catalog`
    below), filled while modules are imported, like Django's admin.site."""

    def __init__(self):
        self.functions: dict[str, Callable] = {}
        self.conflicts: dict[str, set[str]] = {}  # name -> every path registered under it (if several)
        self._resolvers: dict[str, Callable[[str], Callable]] = {}

    def register(self, name: str, fn: Callable) -> None:
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
            raise ValueError(f"a processor name is 1-{MAX_NAME} characters (got {name!r})")
        known = self.functions.get(name)
        if known is not None and dotted_path(known) != dotted_path(fn):
            # the first one stays; the system check reports the clash
            self.conflicts.setdefault(name, {dotted_path(known)}).add(dotted_path(fn))
            return
        self.functions[name] = fn  # the same path again: a module imported twice

    def add_resolver(self, prefix: str, resolve: Callable[[str], Callable]) -> None:
        self._resolvers[prefix] = resolve

    def prefixes(self) -> list[str]:
        """The name prefixes that resolvers serve (a worker may run any name under them)."""
        return sorted(self._resolvers)

    def resolver(self, name: str) -> Callable[[str], Callable] | None:
        for prefix, resolve in self._resolvers.items():
            if name.startswith(prefix):
                return resolve
        return None


catalog = Catalog()


def processor(name: str | Callable | None = None):
    """`@processor("name")`, or bare `@processor` (the name is the function's
    dotted path): registers the function in the catalog, unchanged."""
    if callable(name):
        catalog.register(dotted_path(name), name)
        return name

    def decorate(fn: Callable) -> Callable:
        catalog.register(name or dotted_path(fn), fn)
        return fn
    return decorate


class Processors:
    """Name -> callable, imported on first use; knows which take a context.
    Names come from `paths` (the settings map), then the catalog's functions,
    and names under a resolver's prefix are resolved by it."""

    def __init__(self, paths: dict[str, str], catalog: Catalog = catalog,
                 late: Callable[[], dict[str, str]] | None = None):
        """`late`, if given, is asked once for the full map when a name is not
        found: a worker that starts serving before Django has set up (and
        imported the apps' `@processor` and task modules) waits for it there."""
        self.paths = dict(paths)
        self.catalog = catalog
        self.late = late
        self._loaded: dict[str, tuple[Callable, bool]] = {}

    def names(self) -> list[str]:
        return sorted(set(self.paths) | set(self.catalog.functions))

    def __contains__(self, name: str) -> bool:
        return name in self.paths or name in self.catalog.functions

    def get(self, name: str) -> tuple[Callable, bool]:
        if name not in self._loaded and self.late is not None and name not in self:
            self.paths, self.late = dict(self.late()), None
        if name not in self._loaded:
            if name in self.paths:
                fn = import_path(self.paths[name])
            elif name in self.catalog.functions:
                fn = self.catalog.functions[name]
            elif (resolve := self.catalog.resolver(name)) is not None:
                fn = resolve(name)
            else:
                raise ProcessorError(f"unknown processor {name!r}")
            takes_ctx = len(inspect.signature(fn).parameters) >= 2
            self._loaded[name] = (fn, takes_ctx)
        return self._loaded[name]
