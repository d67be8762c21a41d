"""The live pages' topics: what a socket may watch, and what changes it.

A topic names a page region and its parameters; a socket watches one, named
in its URL, and it must be exactly one of these forms (`FORMS`):

    overview, workers, queues
    request:<id>:<after>:<before>       a request's page ("$" or an item id as cursors)
    rows:<id>,<id>,...                  the live rows of a page of the request list
    inflight:<queue>:<stuck 0|1>:<page>
    dead:<queue>:<request id>:<page>
    scheduled:<page>

* `topic_ok(topic)`: one of these forms (checked before anything is read);
* `topic_exists(topic)`: and names what exists (its queue, its requests);
* `request_ids(topic)`: the requests whose events change it (the relay);
* `period(topic)`: how often it is refreshed without events.

Rendering a topic is core/live/render.py; the caps on sockets and topics are
core/live/sockets.py.
"""
from __future__ import annotations

import re

from queueadmin.core import clients
from queueadmin.core.models import RequestRecord

MAX_ROWS = 50  # ids in a "rows:" topic: one page of the requests list

_RID = r"[0-9A-Za-z_-]{1,32}"
_ENTRY = r"\d{1,20}-\d{1,20}"
_QUEUE = r"[A-Za-z0-9._-]{0,64}"
_PAGE = r"[1-9]\d{0,5}"
FORMS = {
    "overview": re.compile(r"overview"),
    "workers": re.compile(r"workers"),
    "queues": re.compile(r"queues"),
    "request": re.compile(rf"request:{_RID}:(?:\$|{_ENTRY})?:(?:{_ENTRY})?"),
    "rows": re.compile(rf"rows:{_RID}(?:,{_RID}){{0,{MAX_ROWS - 1}}}"),
    "inflight": re.compile(rf"inflight:(?P<queue>{_QUEUE}):[01]:{_PAGE}"),
    "dead": re.compile(rf"dead:(?P<queue>{_QUEUE}):(?:{_RID})?:{_PAGE}"),
    "scheduled": re.compile(rf"scheduled:{_PAGE}"),
}


def topic_ok(topic: str) -> bool:
    """Is `topic` exactly a form a page uses? (Whether what it names exists
    is `topic_exists`.)"""
    if not isinstance(topic, str) or len(topic) > 2000:
        return False
    form = FORMS.get(topic.partition(":")[0])
    if form is None or form.fullmatch(topic) is None:
        return False
    if topic.startswith("rows:"):
        ids = topic[5:].split(",")
        return len(set(ids)) == len(ids)
    return True


def topic_exists(topic: str) -> bool:
    """Does a well-formed topic (`topic_ok`) name what exists: its queue,
    its request(s)? A topic naming nothing would cost renders of an empty
    region on every update. Raises if Redis or the database is away."""
    kind, _, rest = topic.partition(":")
    fields = rest.split(":")
    if kind in ("inflight", "dead") and fields[0] and fields[0] not in clients.engine().queues():
        return False
    if kind == "request" or (kind == "dead" and fields[1]):
        return _requests_exist([fields[0] if kind == "request" else fields[1]])
    if kind == "rows":
        ids = rest.split(",")  # the list's live rows: rendered from their records
        return RequestRecord.objects.filter(id__in=ids).count() == len(ids)
    return True


def _requests_exist(ids: list[str]) -> bool:
    """Each id is a request Redis holds, or one in the history."""
    eng = clients.engine()
    pipe = eng.redis.pipeline(transaction=False)
    for rid in ids:
        pipe.exists(eng.keys.request(rid).meta)
    missing = [rid for rid, n in zip(ids, pipe.execute()) if not n]
    return not missing or RequestRecord.objects.filter(id__in=missing).count() == len(missing)


def request_ids(topic: str) -> set[str] | None:
    """The requests whose events change this topic (None: any event does)."""
    kind, _, rest = topic.partition(":")
    if kind == "request":
        return {rest.partition(":")[0]}
    if kind == "rows":
        return set(rest.split(","))
    if kind in ("workers",):
        return set()  # heartbeats, not request events: refreshed on a timer
    return None


# Topics refreshed on a timer too (ages, heartbeats, throughput move without events).
PERIODIC = {"overview": 2.0, "inflight": 2.0, "workers": 2.0, "queues": 5.0, "scheduled": 5.0, "dead": 10.0,
            "request": 5.0}


def period(topic: str) -> float | None:
    return PERIODIC.get(topic.partition(":")[0])
