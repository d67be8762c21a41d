"""Work that waits for a worker able to run it (core/engine/abilities.py):
for the overview's queues, a request's page and `queue_status`. A queue
with no such work costs one HLEN in a pipeline."""
from __future__ import annotations

from queueadmin.core import conf
from queueadmin.core.engine.runtime import abilities
from queueadmin.core.engine.runtime.registry import Registry

from .base import client, keys, rdb
from .requests import LIVE_STATES


def registered() -> list[dict]:
    """Every registered worker's hash (what it says it can run) with `live`."""
    return Registry(rdb(), keys(), dead_after=float(conf.get("DEAD_AFTER_SECONDS"))).workers()


def _seconds(config: dict) -> float:
    try:
        return float(config.get("unrunnable_seconds") or conf.get("UNRUNNABLE_SECONDS"))
    except (TypeError, ValueError):
        return float(conf.get("UNRUNNABLE_SECONDS"))


def by_queue(names: list[str], configs: dict[str, dict] | None = None) -> dict[str, list[dict]]:
    """Queue -> abilities.waiting entries, for the queues where a worker
    could not run something (`configs`: their config hashes, if at hand)."""
    pipe = rdb().pipeline(transaction=False)
    for name in names:
        pipe.hlen(keys().queue(name).needs)
    marked = [name for name, n in zip(names, pipe.execute()) if n]
    if not marked:
        return {}
    workers, configs = registered(), configs or {}
    return {name: entries for name in marked
            if (entries := abilities.waiting(client(), name, workers, _seconds(
                configs.get(name) or rdb().hgetall(keys().queue(name).config))))}


def for_request(st: dict) -> dict | None:
    """The request's wait for a worker that has its processor, if one lacked it."""
    if st.get("state") not in LIVE_STATES or not st.get("queue") or not st.get("id"):
        return None
    if not rdb().hexists(keys().queue(st["queue"]).needs, st["id"]):
        return None
    config = rdb().hgetall(keys().queue(st["queue"]).config)
    return abilities.request_wait(client(), st["queue"], st["id"], registered(), _seconds(config))
