"""The Django Tasks backend (core/tasks.py): `@task` functions of the example
app (tests/taskapp) and of a module of no installed app (tests/project_tasks.py)
enqueued through the framework, run by real worker processes, read back with
get_result; enqueue_many; on-commit enqueue; queues from the database on a
fresh Redis; aenqueue and aget_result off the event loop; what a caller may
and may not make a worker run."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.runtime.processors import ProcessorError, Processors
from queueadmin.core.models import Queue, RequestRecord
from queueadmin.core.tasks import (TaskResultDoesNotExist, TaskResultStatus, adapter, engine_priority, enqueue_many,
                        task_backends)
from tests import project_tasks
from tests.engine_helpers import WorkerProcs, wait_for
from tests.taskapp import tasks

pytestmark = pytest.mark.django_db

WORKER_ENV = {"QUEUEADMIN_EXTRA_APPS": "tests.taskapp"}


@pytest.fixture
def taskapp(settings, redis_url):
    """The example app installed (its processors join a copy of the settings
    map), an engine client on the test's Redis, queues `default` and `flaky`."""
    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "PROCESSORS": dict(settings.QUEUEADMIN["PROCESSORS"])}
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "tests.taskapp"]
    services.reset()
    client = services.engine()
    client.define_queue("default", QueueConfig())
    client.define_queue("flaky", QueueConfig(max_attempts=2, backoff_seconds=0.05))
    return client


@pytest.fixture
def task_workers(redis_url, worker_db, tmp_path):
    """Real `manage.py queue_worker` processes with the example app installed."""
    procs = WorkerProcs(redis_url, worker_db, tmp_path, **WORKER_ENV)
    yield procs
    procs.stop_all()


def run_burst(procs: WorkerProcs, queues="default,flaky"):
    proc = procs.start(queues=queues, burst=True)
    assert proc.wait(timeout=90) == 0, procs.logs()


def backend():
    return task_backends["default"]


# -- through real workers ----------------------------------------------------------


def test_tasks_run_on_real_workers_and_results_read_back(taskapp, task_workers):
    added = tasks.add.enqueue(2, 3)
    called = tasks.echo.enqueue(1, "two", flag=True, nested={"a": [1, None]})
    ctx = tasks.whoami.enqueue("hi")
    failed = tasks.boom.enqueue("bad input")

    record = RequestRecord.objects.get(id=added.id)  # in the history, like any request
    assert (record.processor, record.queue, record.total, record.state) == (
        "task:tests.taskapp.tasks.add", "default", 1, "queued")
    assert added.status == TaskResultStatus.READY and added.args == [2, 3]
    assert tasks.add.get_result(added.id).status == TaskResultStatus.READY

    run_burst(task_workers)

    res = tasks.add.get_result(added.id)
    assert res.status == TaskResultStatus.SUCCESSFUL and res.return_value == 5
    assert res.attempts == 1 and res.worker_ids[-1] and res.errors == []
    assert res.args == [2, 3] and res.kwargs == {}
    assert res.enqueued_at <= res.started_at <= res.finished_at
    added.refresh()
    assert added.status == TaskResultStatus.SUCCESSFUL and added.return_value == 5

    assert tasks.echo.get_result(called.id).return_value == {
        "args": [1, "two"], "kwargs": {"flag": True, "nested": {"a": [1, None]}}}
    assert backend().get_result(ctx.id).return_value == {"tag": "hi", "attempt": 1, "request": ctx.id, "index": 0}

    bad = tasks.boom.get_result(failed.id)
    assert bad.status == TaskResultStatus.FAILED and bad.attempts == 2  # the flaky queue allows two
    assert bad.errors[-1].exception_class is ValueError and "bad input" in bad.errors[-1].traceback
    with pytest.raises(ValueError):
        bad.return_value


def test_get_result_reads_the_history_once_redis_let_go(taskapp, task_workers):
    done = tasks.add.enqueue(20, 22)
    run_burst(task_workers)
    status = taskapp.status(done.id)
    services.record(status)  # what the worker's reporter writes (the worker here has its own database)
    taskapp.redis.delete(*taskapp.keys.request(done.id).all())  # retention over
    assert taskapp.status(done.id) is None

    res = backend().get_result(done.id)
    assert res.status == TaskResultStatus.SUCCESSFUL and res.args == [20, 22]
    assert res.finished_at is not None and res.return_value is None  # values stay in Redis only


def test_enqueue_many_is_one_request_with_one_item_per_call(taskapp, task_workers):
    batch = enqueue_many(tasks.square, [1, [2], (3,), ([4], {}), 5], priority=100, concurrency=2)
    assert RequestRecord.objects.count() == 1
    record = RequestRecord.objects.get(id=batch.id)
    assert (record.total, record.priority, record.concurrency, record.processor) == (
        5, 99, 2, "task:tests.taskapp.tasks.square")
    assert batch.total == 5 and not batch.duplicate
    again = enqueue_many(tasks.square, [7, 8], dedup_key="squares-1")
    assert enqueue_many(tasks.square, [9], dedup_key="squares-1").id == again.id
    assert RequestRecord.objects.count() == 2

    run_burst(task_workers, queues="default")
    res = backend().get_result(batch.id)
    assert res.status == TaskResultStatus.SUCCESSFUL and res.return_value == [1, 4, 9, 16, 25]


def test_enqueue_many_can_name_a_follow_up(taskapp, task_workers):
    batch = enqueue_many(tasks.square, [1, 2, 3], then={"processor": "echo", "mode": "all"})
    run_burst(task_workers, queues="default")
    fid = wait_for(lambda: taskapp.status(batch.id).get("then_id"), 20, message="the follow-up")
    assert taskapp.items(fid)[0]["payload"] == [1, 4, 9]


def test_decorated_processors_run_on_real_workers(taskapp, task_workers):
    double = services.submit("default", "taskapp.double", [21])
    triple = services.submit("default", "tests.taskapp.processors.triple", [5])
    run_burst(task_workers, queues="default")
    assert [r["result"] for r in taskapp.results(double.id)] == [42]
    assert [r["result"] for r in taskapp.results(triple.id)] == [{"value": 15, "attempt": 1}]


def test_async_tasks_and_processors_run_on_the_worker_event_loop(taskapp, task_workers):
    """Needs the runtime issue's worker (it awaits `async def` processors)."""
    added = tasks.add_async.enqueue(40, 2)
    ctx = tasks.whoami_async.enqueue("loop")
    proc = services.submit("default", "taskapp.async_double", [8])
    run_burst(task_workers, queues="default")
    assert tasks.add_async.get_result(added.id).return_value == 42
    got = tasks.whoami_async.get_result(ctx.id)
    assert got.return_value == {"tag": "loop", "attempt": 1, "request": ctx.id}
    assert [r["result"] for r in taskapp.results(proc.id)] == [16]


# -- submission ----------------------------------------------------------------


def test_priority_maps_django_range_onto_the_engine(taskapp):
    assert [engine_priority(p) for p in (-100, -50, 0, 50, 100)] == [0, 25, 50, 74, 99]
    mapped = [engine_priority(p) for p in range(-100, 101)]
    assert mapped == sorted(mapped) and set(mapped) == set(range(100))  # monotonic, onto 0..99
    low = tasks.add.using(priority=-100).enqueue(1, 1)
    high = tasks.add.using(priority=60).enqueue(1, 2)
    assert RequestRecord.objects.get(id=low.id).priority == 0
    assert RequestRecord.objects.get(id=high.id).priority == engine_priority(60) == 79


def test_run_after_becomes_a_delay(taskapp):
    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
    status = taskapp.status(later.id)
    assert status["state"] == "scheduled" and status["not_before"] - status["created_at"] > 3500
    assert backend().get_result(later.id).status == TaskResultStatus.READY


def test_non_json_arguments_are_refused_and_nothing_is_submitted(taskapp):
    for args, kwargs in [((object(),), {}), (({1, 2},), {}), ((), {"x": float("nan")}), ((b"\xff",), {})]:
        with pytest.raises(TypeError, match="must be JSON"):
            tasks.echo.enqueue(*args, **kwargs)
    with pytest.raises(TypeError, match="must be JSON"):
        enqueue_many(tasks.square, [1, object()])
    assert not RequestRecord.objects.exists() and not taskapp.live_requests("default")


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(st.recursive(st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=20),
                                  lambda inner: st.lists(inner, max_size=3)
                                  | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8),
                     max_size=4))
def test_json_arguments_round_trip(taskapp, args):
    got = backend().get_result(tasks.echo.enqueue(*args).id)
    assert got.args == json.loads(json.dumps(args)) and got.status == TaskResultStatus.READY


def test_on_commit_enqueue_waits_for_the_commit_and_a_rollback_drops_it(taskapp, settings,
                                                                      django_capture_on_commit_callbacks):
    settings.TASKS = {"default": {**settings.TASKS["default"], "ENQUEUE_ON_COMMIT": True}}
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            dropped = tasks.add.enqueue(1, 2)
            batch = enqueue_many(tasks.square, [1, 2])
            raise RuntimeError("roll back")
    assert dropped.id == "" and batch.id == ""
    assert not RequestRecord.objects.exists() and not taskapp.live_requests("default")

    with django_capture_on_commit_callbacks(execute=True):
        kept = tasks.add.enqueue(3, 4)
        assert kept.id == "" and not taskapp.live_requests("default")  # not before the commit
    assert RequestRecord.objects.filter(id=kept.id, processor="task:tests.taskapp.tasks.add").exists()


# -- what may run ----------------------------------------------------------------


def test_workers_resolve_task_names_only_to_tasks_of_this_backend(taskapp):
    fn = adapter("task:tests.taskapp.tasks.add")
    assert fn({"args": [1, 2], "kwargs": {}}, None) == 3
    assert Processors({}).get("task:tests.taskapp.tasks.square")[0]({"args": [3]}, None) == 9
    assert adapter("task:tests.project_tasks.multiply")({"args": [6, 7]}, None) == 42  # no installed app's
    for name in ("task:os.system", "task:subprocess.run", "task:tests.taskapp.tasks.not_a_task",
                 "task:tests.taskapp.tasks.missing", "task:tests.engine_helpers.burst", "task:", "task:add",
                 "task:..taskapp.tasks.add", "task:tests.no_such_module.x", "task:tests.taskapp.bad.generate"):
        with pytest.raises(ProcessorError):
            Processors({}).get(name)


def test_submission_refuses_task_names_never_defined(taskapp):
    """The API and the form submit through the same check: a name that no
    task of this process carries is an unknown processor."""
    with pytest.raises(QueueError, match="unknown processor"):
        services.submit("default", "task:os.system", [{"args": ["id"], "kwargs": {}}])
    with pytest.raises(QueueError, match="unknown processor"):
        services.submit("default", "task:tests.taskapp.tasks.not_a_task", [{"args": [1]}])


def test_unknown_results(taskapp):
    with pytest.raises(TaskResultDoesNotExist):
        backend().get_result("0000000000000000")
    plain = services.submit("default", "echo", ["x"])  # a request, but no task's
    with pytest.raises(TaskResultDoesNotExist):
        backend().get_result(plain.id)


def test_a_result_whose_task_is_gone_from_the_code(taskapp):
    services.engine().processors.add("task:tests.taskapp.tasks.removed")
    gone = services.submit("default", "task:tests.taskapp.tasks.removed", [{"args": [], "kwargs": {}}])
    with pytest.raises(TaskResultDoesNotExist, match="removed"):
        backend().get_result(gone.id)


# -- tasks anywhere, queues from the database ----------------------------------------


def test_a_task_of_a_module_of_no_installed_app_runs_on_real_workers(taskapp, task_workers):
    """As `shop/tasks.py` in a project: not an installed app's module."""
    product = project_tasks.multiply.enqueue(6, 7)
    assert RequestRecord.objects.get(id=product.id).processor == "task:tests.project_tasks.multiply"
    run_burst(task_workers, queues="default")
    got = project_tasks.multiply.get_result(product.id)
    assert got.status == TaskResultStatus.SUCCESSFUL and got.return_value == 42 and got.attempts == 1


@pytest.fixture
def fresh(settings, redis_url):
    """A Redis that no worker, command or page has told of any queue."""
    services.reset()
    assert services.engine().queues() == []
    return services.engine()


def test_enqueue_on_a_fresh_redis_takes_the_queue_from_the_database(fresh):
    Queue.objects.update_or_create(name="default", defaults={"lease_seconds": 17})
    added = tasks.add.enqueue(1, 2)
    assert fresh.queue_config("default").lease_seconds == 17 and fresh.status(added.id)["queue"] == "default"
    Queue.objects.create(name="elsewhere", max_attempts=5)
    placed = project_tasks.located.enqueue(3)  # its own queue_name
    assert fresh.status(placed.id)["queue"] == "elsewhere" and fresh.queue_config("elsewhere").max_attempts == 5
    batch = enqueue_many(tasks.square.using(queue_name="elsewhere"), [1, 2])
    assert fresh.status(batch.id)["queue"] == "elsewhere"
    with pytest.raises(QueueError, match="unknown queue 'nowhere'"):
        tasks.add.using(queue_name="nowhere").enqueue(1, 2)


def test_default_always_exists(fresh):
    Queue.objects.filter(name="default").delete()  # no row: made as migration 0002 does
    added = tasks.add.enqueue(1, 2)
    assert Queue.objects.filter(name="default").exists() and fresh.status(added.id)["state"] == "queued"


def test_using_options_reach_the_request(taskapp):
    later = timezone.now() + timedelta(minutes=5)
    moved = tasks.add.using(queue_name="flaky", priority=-50, run_after=later).enqueue(1, 2)
    st = taskapp.status(moved.id)
    assert (st["queue"], st["priority"], st["state"]) == ("flaky", 25, "scheduled")
    assert moved.task.queue_name == "flaky" and moved.task.priority == -50
    batch = enqueue_many(tasks.square.using(queue_name="flaky", priority=100), [2, 3], concurrency=1)
    st = taskapp.status(batch.id)
    assert (st["queue"], st["priority"], st["concurrency"], st["total"]) == ("flaky", 99, 1, 2)


# -- aenqueue and aget_result --------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_aenqueue_and_aget_result_hold_neither_the_loop_nor_the_shared_sync_thread(taskapp, r):
    """While Django's one shared sync thread is busy and Redis holds writes
    back (CLIENT PAUSE), the event loop keeps running: the calls run on
    threads of their own."""
    gate = threading.Event()

    async def main():
        busy = asyncio.ensure_future(sync_to_async(gate.wait, thread_sensitive=True)(10))
        await asyncio.sleep(0.05)  # the shared thread is taken
        gaps, stop = [], False

        async def tick():
            last = time.monotonic()
            while not stop:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticker = asyncio.ensure_future(tick())
        r.client_pause(400, all=False)  # writes wait 0.4 s
        began = time.monotonic()
        result = await tasks.add.aenqueue(20, 22)
        took = time.monotonic() - began
        got = await tasks.add.aget_result(result.id)
        other = await project_tasks.amultiply.using(priority=10).aenqueue(3, 4)
        stop = True
        await ticker
        assert not busy.done()  # none of it needed the shared thread
        gate.set()
        await busy
        return result, got, other, took, max(gaps)

    result, got, other, took, worst_gap = asyncio.run(main())
    assert took >= 0.3 and worst_gap < 0.2, (took, worst_gap)  # the loop ran while the write waited
    assert got.id == result.id and got.status == TaskResultStatus.READY and got.args == [20, 42 - 20]
    assert RequestRecord.objects.get(id=other.id).priority == engine_priority(10)
    assert taskapp.status(other.id)["processor"] == "task:tests.project_tasks.amultiply"
