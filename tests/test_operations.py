"""The operations module (core/operations.py): every entry point submits and
steers through it, and the request history keeps in step whoever asked."""
import pytest
import redis
from django.contrib.auth.models import User

from queueadmin.core import clients, operations, services
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.models import Queue, RequestRecord
from tests.engine_helpers import burst

pytestmark = pytest.mark.django_db


def test_services_is_the_documented_door_to_the_same_functions():
    assert services.submit is operations.submit and services.sync_queues is operations.sync_queues
    assert services.engine is clients.engine and services.reset is clients.reset


def test_a_submission_is_recorded_with_its_preview_and_user_and_a_duplicate_is_not(engine):
    user = User.objects.create_user("producer", password="pw", is_staff=True)
    sub = operations.submit("default", "echo", ["a", {"b": 1}], user=user)
    row = RequestRecord.objects.get(id=sub.id)
    assert (row.state, row.total, row.items_preview, row.submitted_by) == ("queued", 2, 'a\n{"b": 1}', user)
    again = operations.submit("default", "echo", ["a", {"b": 1}], user=user)
    assert again.duplicate and again.id == sub.id and RequestRecord.objects.count() == 1
    other = operations.submit("default", "echo", ["a", {"b": 1}])  # another scope: not its duplicate
    assert not other.duplicate and other.id != sub.id


def test_steering_returns_the_new_status_and_the_history_follows(engine):
    rid = operations.submit("default", "echo", ["a", "b"], delay=600).id
    assert operations.set_priority(rid, 90)["priority"] == 90
    assert operations.set_concurrency(rid, 3)["concurrency"] == 3
    row = RequestRecord.objects.get(id=rid)
    assert (row.priority, row.concurrency) == (90, 3)
    assert operations.cancel(rid)["state"] == "cancelled"
    assert RequestRecord.objects.get(id=rid).state == "cancelled"
    with pytest.raises(QueueError):
        operations.set_priority(rid, 10)


def test_dead_letters_retried_reopen_the_request_in_the_history(engine):
    engine.define_queue("once", QueueConfig(max_attempts=1))
    rid = operations.submit("once", "fail", ["x"]).id
    burst(engine, ["once"])
    operations.refresh(rid)
    assert RequestRecord.objects.get(id=rid).state == "failed"
    assert operations.retry_dead(rid) == 1
    assert RequestRecord.objects.get(id=rid).state != "failed"


def test_queues_the_database_configures_are_pushed_only_when_redis_lacks_them(engine):
    Queue.objects.create(name="reports", priority=70)  # post_save pushes it ...
    engine.redis.delete(engine.keys.queue("reports").config)  # ... as if Redis had been flushed since
    assert operations.push_queues(["reports", "default", "nowhere"]) == {"reports", "default"}
    assert engine.queue_config("reports").priority == 70
    Queue.objects.filter(name="default").delete()
    engine.redis.delete(engine.keys.queue("default").config)
    assert operations.push_queues(["default"]) == set()  # neither Redis nor the database has it
    assert operations.push_queues(["default"], make_default=True) == {"default"}  # made, as migration 0002 does
    assert Queue.objects.filter(name="default").exists()


def test_pausing_a_queue_changes_its_row_and_redis_or_neither(engine, monkeypatch):
    operations.set_paused("default", True)
    assert Queue.objects.get(name="default").paused and engine.queue_config("default").paused

    def down(*args, **kwargs):
        raise redis.ConnectionError("Redis is away")

    monkeypatch.setattr(engine, "define_queue", down)
    with pytest.raises(redis.ConnectionError):
        operations.set_paused("default", False)
    assert Queue.objects.get(name="default").paused  # the row follows Redis


def test_a_queue_only_redis_knows_is_paused_in_redis(engine):
    engine.define_queue("adhoc", QueueConfig())
    operations.set_paused("adhoc", True)
    assert engine.queue_config("adhoc").paused and not Queue.objects.filter(name="adhoc").exists()
