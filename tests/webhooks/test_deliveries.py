"""Webhook deliveries, Django side (core/webhooks/deliveries.py): a worker
process run through Django makes a finished request's delivery as its
worker reports the finish (the engine's FINISHED event), and wakes its sender."""
import pytest

from queueadmin.core import services
from queueadmin.core.engine import events
from queueadmin.core.engine.features import webhook_store
from queueadmin.core.webhooks import deliveries, sender
from tests.engine_helpers import burst

pytestmark = pytest.mark.django_db

URL = "https://hooks.example.com/done"


def test_finished_requests_that_asked_get_their_delivery_and_the_sender_is_woken(engine):
    asked = services.submit("default", "uppercase", ["a"], callback_url=URL)
    quiet = services.submit("default", "uppercase", ["b"])
    burst(engine)  # no subscriber in this process: nothing made yet
    assert webhook_store.of_request(engine, asked.id) == []
    sender._wake.clear()
    deliveries.on_finished(events.Finished(engine, [asked.id, quiet.id]))
    (made,) = deliveries.for_request(asked.id)
    assert made["url"] == URL and made["state"] == "pending" and sender._wake.is_set()
    assert deliveries.for_request(quiet.id) == []
    deliveries.on_finished(events.Finished(engine, [asked.id]))  # again: nothing new
    assert len(deliveries.for_request(asked.id)) == 1


def test_a_request_not_finished_gets_none(engine):
    sub = services.submit("default", "echo", ["a"], delay=600, callback_url=URL)
    assert deliveries.enqueue_finished(engine.status(sub.id)) is None
    assert deliveries.for_request(sub.id) == []
