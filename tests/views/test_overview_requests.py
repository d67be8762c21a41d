"""The overview lists running and recently finished requests, each linking
to the request; the partial refreshes itself (htmx, every 3 s)."""
import pytest

from queueadmin.core import operations
from tests.engine_helpers import burst

pytestmark = pytest.mark.django_db


def test_overview_lists_running_and_recently_finished_requests(staff, eng):
    done = operations.submit("default", "echo", ["a", "b"], dedup=False).id
    burst(eng)
    operations.refresh(done)
    waiting = operations.submit("default", "echo", ["c"], dedup=False).id
    eng.redis.hset(eng.keys.request(waiting).meta, "state", "running")  # as a worker's first take makes it
    html = staff.get("/").content.decode()
    running = html[html.index('id="overview-running"'):html.index('id="overview-recent"')]
    recent = html[html.index('id="overview-recent"'):]
    assert f'/requests/{waiting}/' in running and done not in running
    assert f'/requests/{done}/' in recent and "completed" in recent
    part = staff.get("/overview/requests/")
    assert part.status_code == 200 and 'hx-trigger="every 3s"' in part.content.decode()
    assert done in part.content.decode()


def test_the_lists_are_for_staff_only(client, db):
    assert client.get("/overview/requests/").status_code == 302
