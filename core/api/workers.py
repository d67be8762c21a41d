"""The workers, as API operations (issue 22, API parity): list the worker
processes (read), and quiet or stop one (steer), with the dashboard's
semantics through core/operations.py and the same audit entry.

A worker is named in the path by its id (`host:pid:tag`, as the list gives
it); `name` is what every page shows (`host:pid`, or a --name).
"""
from __future__ import annotations

import re
from typing import Optional

from ninja import Router
from pydantic import BaseModel, Field

from queueadmin.core import operations, queries
from queueadmin.core.audit import Actor
from .errors import ApiError
from .requests import ERRORS
from .schemas import ErrorOut
from .security import BearerToken

WORKER_ID = re.compile(r"^[^\s/]{1,300}$")


class WorkerOut(BaseModel):
    id: str = Field(description="the worker's id: host:pid:tag (the path names a worker by it)")
    name: str = Field(description="the name pages show: host:pid")
    given_name: str = Field(description="a name given with --name, or empty")
    host: str
    pid: Optional[int]
    queues: list[str]
    state: str = Field(description="busy, idle, quiet, stopping or dead")
    running: int = Field(description="items it runs now")
    processed: int
    failed: int
    started: float = Field(description="Unix time")
    heartbeat: float = Field(description="Unix time of its last heartbeat")


class WorkerList(BaseModel):
    workers: list[WorkerOut]


class ControlOut(BaseModel):
    id: str
    asked: str = Field(description="quiet or stop: the worker does it within about a heartbeat")


def _out(w: dict) -> dict:
    state = "dead" if w["dead"] else w["state"] or ("busy" if w["current"] else "idle")
    return {"id": w["id"], "name": w["label"], "given_name": w["given"], "host": w["host"], "pid": w["pid"] or None,
            "queues": w["queues"], "state": state, "running": len(w["current"]), "processed": w["processed"],
            "failed": w["failed"], "started": w["started"], "heartbeat": w["heartbeat"]}


def worker_list(request):
    return {"workers": [_out(w) for w in queries.workers(include_recovered=True)]}


def quiet(request, wid: str):
    return _control(request, wid, "quiet")


def stop(request, wid: str):
    return _control(request, wid, "stop")


def _control(request, wid: str, command: str):
    if not WORKER_ID.match(wid) or not operations.control_worker(wid, command, actor=Actor.api(request.api_token)):
        raise ApiError(404, "not_found", "no live worker with that id")
    return {"id": wid, "asked": command}


def mount(router: Router) -> None:
    """Add these operations to the /api/v1 router."""
    router.get("/workers", auth=BearerToken("read"), url_name="api-v1-workers", response={200: WorkerList, **ERRORS},
               tags=["workers"], summary="List worker processes",
               description="Scope: read. Live workers, and dead ones for an hour, flagged.")(worker_list)
    steer = BearerToken("steer", body="small")
    answers = {404: ErrorOut, **ERRORS}
    audited = " Recorded in the audit log with this token as the actor."
    router.post("/workers/{wid}/quiet", auth=steer, url_name="api-v1-worker-quiet", response={200: ControlOut, **answers},
                tags=["workers"], summary="Quiet a worker",
                description="Scope: steer. The worker takes nothing new, finishes what it runs and stays alive "
                            "(shown as quiet) until stopped. 404 when no live worker has that id." + audited)(quiet)
    router.post("/workers/{wid}/stop", auth=steer, url_name="api-v1-worker-stop", response={200: ControlOut, **answers},
                tags=["workers"], summary="Stop a worker",
                description="Scope: steer. The worker takes nothing new, finishes what it runs (or hands it back "
                            "after its grace) and exits; its pool does not replace it. 404 when no live worker "
                            "has that id." + audited)(stop)
