"""Request history in the database: a worker records its finished requests
in batches (one upsert per batch), keeping what the submitter recorded."""
import time
import uuid

import pytest
from django.contrib.auth.models import User
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queueadmin.core import history, services
from queueadmin.core.models import RequestRecord

pytestmark = pytest.mark.django_db


def status(rid, state="completed", done=1, **extra):
    now = time.time()
    return {"id": rid, "queue": "default", "processor": "echo", "state": state, "priority": 50, "concurrency": 4,
            "total": 1, "done": done, "failed": 0, "expired": 0, "dedup_key": "", "created_at": now - 1,
            "not_before": None, "expires_at": None, "started_at": now - 0.5, "finished_at": now, **extra}


def test_a_batch_creates_new_rows_and_updates_known_ones_keeping_the_submitters_fields():
    user = User.objects.create_user("producer", password="pw", is_staff=True)
    services.record(status("known", state="queued", done=0, finished_at=None), items_preview="a\nb", user=user)
    services.record_many([status("known"), status("new1"), status("new2", state="failed", done=0)])
    known = RequestRecord.objects.get(id="known")
    assert (known.state, known.done, known.items_preview, known.submitted_by) == ("completed", 1, "a\nb", user)
    assert known.finished_at is not None
    assert RequestRecord.objects.get(id="new2").state == "failed"
    assert RequestRecord.objects.get(id="new1").items_preview == ""


def test_the_newest_status_of_a_request_wins_within_a_batch_and_big_batches_are_split():
    services.record_many([status("twice", state="running", done=0, finished_at=None), status("twice")])
    assert RequestRecord.objects.get(id="twice").state == "completed"
    services.record_many([status(f"r{i}") for i in range(1200)])
    assert RequestRecord.objects.filter(id__startswith="r", state="completed").count() == 1200


# epoch seconds as the engine gives them (ms / 1000), any float in the history's range, or none
epochs = st.one_of(st.none(), st.integers(1, 4_102_444_800_000).map(lambda ms: ms / 1000),
                   st.floats(1, 4_102_444_800, allow_nan=False, allow_infinity=False))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(created=epochs, started=epochs, finished=epochs)
def test_a_batch_writes_the_times_the_orm_writes(created, started, finished):
    """record_many adapts times itself (history._time_param): the rows it
    writes read back exactly as the ORM's own write of the same status."""
    times = dict(created_at=created or 1.0, started_at=started, finished_at=finished, expires_at=started)
    fast, orm = f"f{uuid.uuid4().hex[:20]}", f"o{uuid.uuid4().hex[:20]}"
    services.record_many([status(fast, **times)])
    services.record(status(orm, **times))
    read = RequestRecord.objects.in_bulk([fast, orm])
    for field in ("created_at", "not_before", "expires_at", "started_at", "finished_at"):
        assert getattr(read[fast], field) == getattr(read[orm], field), field
    when = history._time_param(connection)
    assert when(started) == connection.ops.adapt_datetimefield_value(history._dt(started))
