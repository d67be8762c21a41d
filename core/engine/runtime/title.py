"""Process titles that say what a process does, in ps and top:
`queueadmin worker vm:10707 default,io [3 busy]`, `queueadmin web`.

setproctitle rewrites the title where ps reads it (the kernel's short
`comm` name alone would cut it at 15 characters). Without it (an install
that left it out) titles are simply not set. A title is written only when
its text changes, and the worker changes it at most once a heartbeat, never
per item.
"""
from __future__ import annotations

try:
    import setproctitle as _setproctitle
except ImportError:  # optional at run time: the title is a convenience
    _setproctitle = None

PREFIX = "queueadmin"


class Title:
    def __init__(self):
        self.text = ""

    def set(self, text: str) -> bool:
        """Show `queueadmin <text>`; False when it was already shown (or cannot be)."""
        if text == self.text or _setproctitle is None:
            return False
        self.text = text
        _setproctitle.setproctitle(f"{PREFIX} {text}")
        return True


def worker_text(name: str, queues: list[str], busy: int, state: str = "") -> str:
    """A worker's title: its name, its queues, how many items it runs, and
    whether it is quiet or stopping."""
    text = f"worker {name} {','.join(queues)} [{busy} busy]"
    return f"{text} {state}" if state else text


def current() -> str:
    """The title as ps shows it ("" without setproctitle)."""
    return _setproctitle.getproctitle() if _setproctitle is not None else ""
