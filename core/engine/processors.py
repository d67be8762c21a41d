"""Processors: named callables `payload -> result`, found by dotted path.

A processor may take a second argument, the item's context (`ItemContext`),
to learn its attempt number or extend its lease.
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
    time.sleep(seconds)
    return seconds


def fail(item: Any) -> Any:
    raise RuntimeError(f"fail processor always fails (item: {str(item)[:80]})")


def import_path(path: str) -> Callable:
    module, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ProcessorError(f"cannot import processor {path!r}: {exc}") from exc


class Processors:
    """Name -> callable, imported on first use; knows which take a context."""

    def __init__(self, paths: dict[str, str]):
        self.paths = dict(paths)
        self._loaded: dict[str, tuple[Callable, bool]] = {}

    def names(self) -> list[str]:
        return sorted(self.paths)

    def __contains__(self, name: str) -> bool:
        return name in self.paths

    def get(self, name: str) -> tuple[Callable, bool]:
        if name not in self._loaded:
            if name not in self.paths:
                raise ProcessorError(f"unknown processor {name!r}")
            fn = import_path(self.paths[name])
            takes_ctx = len(inspect.signature(fn).parameters) >= 2
            self._loaded[name] = (fn, takes_ctx)
        return self._loaded[name]
