"""Items a worker cannot run go to a worker that can (DESIGN 15), with real
`manage.py queue_worker` processes: one without the processor "shout"
(QUEUEADMIN_EXTRA_PROCESSORS) and unable to import tests/project_tasks.py
(a module not deployed there), one with both. With no live worker that has
it, the dashboard and `queue_status` say so, and the items fail after the
queue's wait, as the retry policy says. The engine's side, on a cluster
too: tests/test_engine_routing.py."""
from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from queueadmin.core import services
from queueadmin.core.engine.runtime import abilities
from queueadmin.core.engine.runtime.registry import Registry
from queueadmin.core.models import Queue
from tests import project_tasks
from tests.engine_helpers import TEST_PROCESSORS, WorkerProcs, wait_for

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(150)]

SHOUT = {"shout": "queueadmin.core.engine.runtime.processors.uppercase"}


@pytest.fixture
def shout(settings, redis_url):
    """This process offers "shout" (submissions may name it); the queues of the database in Redis."""
    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "PROCESSORS": {**settings.QUEUEADMIN["PROCESSORS"], **SHOUT}}
    services.reset()
    services.sync_queues()
    return services.engine()


@pytest.fixture
def lacking(redis_url, worker_db, tmp_path):
    """Workers without "shout" that cannot import tests.project_tasks."""
    (tmp_path / "lacking").mkdir()
    procs = WorkerProcs(redis_url, worker_db, tmp_path / "lacking", QUEUEADMIN_TEST_NOT_DEPLOYED="1")
    yield procs
    procs.stop_all()


@pytest.fixture
def having(redis_url, worker_db, tmp_path):
    """Workers with "shout" and the task module."""
    (tmp_path / "having").mkdir()
    procs = WorkerProcs(redis_url, worker_db, tmp_path / "having",
                        QUEUEADMIN_EXTRA_PROCESSORS=json.dumps({**TEST_PROCESSORS, **SHOUT}))
    yield procs
    procs.stop_all()


def worker_id(client, proc) -> str:
    """The registry id of a worker process, once it is registered and live."""
    def find():
        return next((w["id"] for w in Registry(client.redis, client.keys).workers()
                     if w.get("pid") == str(proc.pid) and w["live"]), None)
    return wait_for(find, 60, message="the worker's registration")


def marked(client, queue, rid) -> str | None:
    value = client.redis.hget(client.keys.queue(queue).needs, rid)
    return abilities.parse_mark(value)[1] if value else None


def test_a_worker_that_lacks_a_processor_or_a_task_leaves_the_items_to_one_that_has_them(shout, lacking, having):
    first = worker_id(shout, lacking.start("default"))
    many = services.submit("default", "shout", ["a", "b", "c"], dedup=False)
    task = project_tasks.multiply.enqueue(6, 7)
    plain = services.submit("default", "echo", ["x"], dedup=False)
    wait_for(lambda: marked(shout, "default", many.id) == "shout"
             and marked(shout, "default", task.id) == "task:tests.project_tasks.multiply", 60, message=lacking.logs())
    wait_for(lambda: shout.status(plain.id)["state"] == "completed", 30, message=lacking.logs())
    for rid in (many.id, task.id):
        st = shout.status(rid)
        assert (st["state"], st["done"], st["failed"], st["dead"]) == ("queued", 0, 0, 0)
        assert {r["status"] for r in shout.results(rid)} == {"pending"}  # untouched: no attempt counted
    second = worker_id(shout, having.start("default"))
    wait_for(lambda: all(shout.status(rid)["state"] == "completed" for rid in (many.id, task.id)), 60,
             message=having.logs() + lacking.logs())
    assert [(r["result"], r["attempts"], r["worker"]) for r in shout.results(many.id)] == [
        ("A", 1, second), ("B", 1, second), ("C", 1, second)]
    got = project_tasks.multiply.get_result(task.id)
    assert got.return_value == 42 and got.attempts == 1 and got.worker_ids == [second]
    assert [r["worker"] for r in shout.results(plain.id)] == [first]


def test_with_no_live_worker_that_has_it_the_dashboard_and_queue_status_say_so_and_the_items_fail(
        shout, lacking, client, admin_user, capsys):
    Queue.objects.create(name="rare", unrunnable_seconds=4, max_attempts=2, backoff_seconds=0.1)  # pushed on save
    sub = services.submit("rare", "shout", ["x"], dedup=False)
    worker_id(shout, lacking.start("rare"))

    def orphan():
        entries = abilities.waiting(shout, "rare", Registry(shout.redis, shout.keys).workers(), 4)
        return next((e for e in entries if e["orphaned_since"]), None)

    entry = wait_for(orphan, 60, message=lacking.logs())
    assert entry["message"] == "no live worker has processor 'shout'" and entry["request_ids"] == [sub.id]

    call_command("queue_status")
    text = capsys.readouterr().out
    assert "no live worker has processor 'shout': 1 request(s) waiting since" in text and "items fail at" in text
    call_command("queue_status", "--json")
    (rare,) = [q for q in json.loads(capsys.readouterr().out)["queues"] if q["queue"] == "rare"]
    assert [(u["processor"], u["requests"], u["workers"]) for u in rare["waiting_for_workers"]] == [("shout", 1, [])]
    call_command("queue_status", sub.id)
    assert "waiting_for: no live worker has processor 'shout': waiting since" in capsys.readouterr().out

    client.force_login(admin_user)
    page = client.get(reverse("queueadmin:overview")).content.decode()
    assert "No live worker has processor <code>shout</code>: 1 request waits since" in page
    page = client.get(reverse("queueadmin:request_detail", args=[sub.id])).content.decode()
    assert "No live worker has processor <code>shout</code>: this request waits for one since" in page
    assert shout.status(sub.id)["failed"] == 0

    wait_for(lambda: shout.status(sub.id)["state"] == "failed", 60, message=lacking.logs())
    (record,) = list(shout.results(sub.id))
    assert record["status"] == "failed" and record["attempts"] == 2  # the retry policy: two attempts, then dead
    assert record["error"].startswith("NoWorker: no live worker has processor 'shout'")
    assert shout.status(sub.id)["dead"] == 1
