"""Quiet and stop a worker process through Redis (client/workers.py): real
`queue_worker` processes read the ask in their heartbeat's round trip. A
quiet worker takes nothing new, finishes what it holds and stays alive,
shown as quiet; a stopped one finishes what it holds and exits, and its pool
does not start another in its place. Nothing is lost either way."""
import time
from pathlib import Path

import pytest

from queueadmin.core.engine.client.workers import QUIET, STOP, WorkerSteering
from tests.engine_helpers import wait_for

BACKENDS = ("single", "cluster")  # each test runs on one server and on a local cluster (conftest)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def live_workers(qc) -> list[dict]:
    out = []
    for wid in qc.redis.zrange(qc.keys.workers, 0, -1):
        info = qc.redis.hgetall(qc.keys.worker(wid))
        if info and info.get("dead") != "1":
            out.append(info)
    return out


def one_worker(qc) -> dict:
    return wait_for(lambda: (lambda ws: ws[0] if len(ws) == 1 else None)(live_workers(qc)), 30, message="a worker")


def title(pid) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()


def test_a_quiet_worker_finishes_its_item_takes_nothing_new_and_stays_alive(qc, workers):
    first = qc.submit("default", "sleep", [1.5])
    proc = workers.start()
    info = one_worker(qc)
    wait_for(lambda: qc.status(first.id)["in_flight"] == 1, 30)
    steer = WorkerSteering(qc.redis, qc.keys, dead_after=1.5)
    assert steer.ask(info["id"], QUIET)
    wait_for(lambda: qc.redis.hget(qc.keys.worker(info["id"]), "state") == "quiet", 10, message="quiet")
    second = qc.submit("default", "echo", ["later"])
    wait_for(lambda: qc.status(first.id)["state"] == "completed", 30)
    (rec,) = list(qc.results(first.id))
    assert rec["status"] == "done" and rec["attempts"] == 1
    time.sleep(1.5)  # several heartbeats and upkeep passes: still nothing taken, still alive
    assert proc.poll() is None
    assert qc.status(second.id)["state"] == "queued" and qc.status(second.id)["in_flight"] == 0
    assert [w["id"] for w in live_workers(qc)] == [info["id"]]
    assert title(proc.pid).startswith(f"queueadmin worker {info['name']} default [0 busy] quiet")
    assert not steer.ask(info["id"], QUIET) or steer.asked(info["id"]) == QUIET  # asking twice changes nothing
    assert steer.ask(info["id"], STOP)  # a stop overrides a quiet
    assert proc.wait(15) == 0
    workers.start()  # nothing was lost: the next worker runs what the quiet one left
    wait_for(lambda: qc.status(second.id)["state"] == "completed", 30, message=workers.logs())


def test_a_stopped_worker_finishes_its_item_and_exits(qc, workers):
    sub = qc.submit("default", "sleep", [1.5])
    proc = workers.start()
    info = one_worker(qc)
    # the title is set at the worker's first heartbeat, which may come just after it registered
    wait_for(lambda: title(proc.pid).startswith(f"queueadmin worker {info['name']} default ["), 5,
             message="the worker's process title")
    wait_for(lambda: qc.status(sub.id)["in_flight"] == 1, 30)
    wait_for(lambda: "[1 busy]" in title(proc.pid), 5, message="the title counts the running item")
    assert WorkerSteering(qc.redis, qc.keys, dead_after=1.5).ask(info["id"], STOP)
    assert proc.wait(15) == 0
    (rec,) = list(qc.results(sub.id))
    assert rec["status"] == "done" and rec["attempts"] == 1
    assert not qc.redis.exists(qc.keys.worker(info["id"]), qc.keys.worker_control(info["id"]))


def test_a_stopped_pool_process_is_not_replaced_and_the_others_go_on(qc, workers):
    proc = workers.start(processes=2)
    ws = wait_for(lambda: (lambda ws: ws if len(ws) == 2 else None)(live_workers(qc)), 30, message="two workers")
    assert {w["name"] for w in ws} == {f"{w['host']}:{w['pid']}" for w in ws}  # one name: host and pid
    assert title(proc.pid) == "queueadmin worker pool default [2 processes]"
    want = {f"queueadmin worker {w['name']} default [0 busy]" for w in ws}
    wait_for(lambda: {title(int(w["pid"])) for w in ws} == want, 5, message="the children's titles")
    victim, other = ws
    assert WorkerSteering(qc.redis, qc.keys, dead_after=1.5).ask(victim["id"], STOP)
    wait_for(lambda: not qc.redis.exists(qc.keys.worker(victim["id"])), 15, message="the stopped one leaves")
    time.sleep(1.5)  # a crashed child would be restarted after 0.5 s
    assert [w["id"] for w in live_workers(qc)] == [other["id"]] and proc.poll() is None
    sub = qc.submit("default", "echo", list(range(20)))
    wait_for(lambda: qc.status(sub.id)["state"] == "completed", 30, message=workers.logs())


def test_only_a_live_worker_can_be_asked(qc):
    steer = WorkerSteering(qc.redis, qc.keys)
    assert not steer.ask("nohost:1:abcd", STOP)
    assert not qc.redis.exists(qc.keys.worker_control("nohost:1:abcd"))
    with pytest.raises(ValueError):
        steer.ask("nohost:1:abcd", "reboot")


def test_a_quiet_burst_worker_finishes_what_it_holds_and_exits(qc, workers):
    sub = qc.submit("default", "sleep", [1.0, 1.0], concurrency=1)
    proc = workers.start(burst=True)
    info = one_worker(qc)
    wait_for(lambda: qc.status(sub.id)["in_flight"] == 1, 30)
    assert WorkerSteering(qc.redis, qc.keys, dead_after=1.5).ask(info["id"], QUIET)
    assert proc.wait(15) == 0  # a burst worker that takes nothing more has nothing left to do
    assert qc.status(sub.id)["done"] == 1  # the held item finished; the other waits for a worker
