"""The processors a deployment offers, the same in the web process and in
every worker: the built-in ones, the settings map QUEUEADMIN["PROCESSORS"]
(name -> dotted path), plus the `@processor` functions of every installed
app's `processors.py`, found at start-up (QueueadminConfig.ready);
`conf.processors()` is the one list that submission, the forms and the
workers read.

    # myapp/processors.py
    from queueadmin.core.catalog import processor

    @processor("thumbnail")
    def thumbnail(item): ...

    @processor              # named "myapp.processors.resize"
    async def resize(item, ctx): ...
"""
from __future__ import annotations

from django.utils.module_loading import autodiscover_modules

from queueadmin.core import conf
from queueadmin.core.engine.runtime.processors import catalog, dotted_path, processor

__all__ = ["processor", "autodiscover", "clashes"]


def autodiscover() -> None:
    """Import every installed app's `processors` module, whose decorated
    functions join `conf.processors()` (a name the settings give keeps its
    path; the system check reports the clash)."""
    autodiscover_modules("processors")


def clashes() -> dict[str, list[str]]:
    """Names given to more than one processor: name -> the paths."""
    paths = {**conf.BUILTIN_PROCESSORS, **(conf.get("PROCESSORS") or {})}
    out = {name: set(found) for name, found in catalog.conflicts.items()}
    for name, fn in catalog.functions.items():
        if paths.get(name, dotted_path(fn)) != dotted_path(fn):
            out.setdefault(name, set()).update({paths[name], dotted_path(fn)})
    return {name: sorted(found) for name, found in sorted(out.items())}
