"""A worker process run through Django (core/launch.py) records what its
worker sees finish: the history and webhook deliveries hang on the engine's
FINISHED event there; on the fast path they wait for Django to be set up."""
import threading
import time

import pytest

from queueadmin.core import history, launch, services
from queueadmin.core.engine import events
from queueadmin.core.models import RequestRecord
from queueadmin.core.webhooks import deliveries
from tests.engine_helpers import burst

pytestmark = pytest.mark.django_db


@pytest.fixture
def recording():
    """This process records finishes, as a worker process does; undone afterwards."""
    launch.record_finishes()
    yield
    for fn in launch.django_subscribers():
        events.unsubscribe(events.FINISHED, fn)


def test_the_django_side_subscribes_deliveries_then_history():
    assert launch.django_subscribers() == [deliveries.on_finished, history.on_finished]


def test_a_worker_in_a_recording_process_writes_the_history_of_what_it_finished(engine, recording):
    sub = services.submit("default", "uppercase", ["a", "b"])
    RequestRecord.objects.filter(id=sub.id).update(state="queued", done=0)
    burst(engine)  # no on_finish: the FINISHED event is enough
    row = RequestRecord.objects.get(id=sub.id)
    assert (row.state, row.done) == ("completed", 2)


def test_on_the_fast_path_finishes_wait_for_django_and_none_is_lost():
    side = launch.DjangoSide(sync_queues=False)  # not started: its set-up is played by hand below
    side.begin = lambda: None
    heard = []
    done = threading.Thread(target=side.finished, args=("finished",))
    done.start()
    time.sleep(0.2)
    assert done.is_alive() and heard == []  # waits while Django sets up
    side.subscribers = [heard.append]
    side.ready.set()
    done.join(5)
    assert heard == ["finished"]


def test_a_worker_calls_on_serving_once_after_its_first_claim(engine):
    """The fast path begins Django's set-up there (launch.DjangoSide): after the
    first claim, not before it, and once however many claims follow."""
    sub = services.submit("default", "uppercase", ["a", "b", "c"])
    seen = []
    burst(engine, on_serving=lambda: seen.append(engine.status(sub.id)["state"]))
    assert seen == ["running"]  # its item was claimed (and taken) before the call
    assert engine.status(sub.id)["state"] == "completed"


@pytest.mark.parametrize("first", ["processor", "finish"])
def test_the_django_side_begins_its_set_up_once_when_a_processor_or_a_finish_needs_it_first(first):
    """Before the worker's first claim, an app's processor or a finish to
    record begins the set-up at once (else each would wait DJANGO_WAIT)."""
    side = launch.DjangoSide(sync_queues=False)
    begun = []
    side._setup = lambda: (begun.append(threading.current_thread().name), side.ready.set())
    started = time.monotonic()
    if first == "processor":
        assert side.processors() == launch.conf.processors()
    else:
        side.finished("finished")
    assert begun == ["django-setup"] and time.monotonic() - started < 5
    side.finished("finished")
    side.begin()  # the worker's first claim, later: nothing more begins
    assert begun == ["django-setup"]
