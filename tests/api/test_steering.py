"""API parity (issue 22): what the dashboard does to one request, item,
queue or periodic request is an /api/v1 operation (core/api/steering.py),
with its scope, in the OpenAPI schema, with the dashboard's semantics and
the same audit entries; bad input never gets a 5xx."""
from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from queueadmin.core import services
from queueadmin.core.audit import AuditEntry
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.models import ApiToken, PeriodicRequest, Queue
from tests.api_helpers import Api, make_user, token_for
from tests.engine_helpers import burst
from tests.views.test_views import register_worker, take_without_ack

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]

OPERATIONS = [("/requests/{rid}/retry", "steer"), ("/requests/{rid}/discard", "steer"),
              ("/requests/{rid}/requeue", "steer"), ("/requests/{rid}/items/{entry}/stop", "steer"),
              ("/requests/{rid}/run-now", "steer"), ("/queues/{name}/pause", "steer"),
              ("/queues/{name}/resume", "steer"), ("/periodic/{name}/run", "submit"),
              ("/periodic/{name}/pause", "steer"), ("/periodic/{name}/resume", "steer")]


@pytest.fixture
def eng(engine):
    engine.define_queue("once", QueueConfig(max_attempts=1, backoff_seconds=0.01))
    return engine


def dead_request(eng, n=3):
    rid = services.submit("once", "fail", [f"x{i}" for i in range(n)]).id
    burst(eng, ["once"])
    assert eng.status(rid)["dead"] == n
    return rid


def last_entry():
    return AuditEntry.objects.order_by("-id").first()


def test_every_operation_is_in_the_schema_with_its_scope(client, db):
    schema = client.get("/api/openapi.json").json()
    for path, scope in OPERATIONS:
        op = schema["paths"]["/api/v1" + path]["post"]
        assert op["description"].startswith(f"Scope: {scope}"), path
        assert {"200", "403", "404", "409"} <= set(op["responses"]), path
        assert "audit log" in op["description"]


def test_retry_and_discard_dead_letters_all_or_some_audited_as_the_token(eng):
    api = Api(ApiToken.issue(make_user("ops", act=True), "ci-bot")[1])
    rid = dead_request(eng, 3)
    entries = [d["entry"] for d in eng.dead_letters(rid)]
    one = api.post(f"/api/v1/requests/{rid}/retry", {"entries": [entries[0]]})
    assert one.status_code == 200 and one.json() == {"id": rid, "count": 1}
    entry = last_entry()
    assert (entry.action, entry.source, entry.who, entry.request_id, entry.queue, entry.count) == (
        "retry_dead", "api", "token ci-bot (ops)", rid, "once", 1)
    assert entry.detail == {"entries": [entries[0]]} and entry.user.username == "ops"
    gone = api.post(f"/api/v1/requests/{rid}/discard")  # no body: all of them
    assert gone.json() == {"id": rid, "count": 2} and eng.status(rid)["dead"] == 0
    assert (last_entry().action, last_entry().count, last_entry().detail) == ("discard", 2, {"entries": "all"})
    again = api.post(f"/api/v1/requests/{rid}/retry", {})
    assert again.json()["count"] == 0
    assert AuditEntry.objects.count() == 2, "nothing done, nothing recorded"


def test_requeue_and_stop_in_flight_items(eng, api):
    rid = services.submit("default", "echo", ["a", "b"], concurrency=2).id
    register_worker(eng, "ghost:1:aa", time.time() * 1000)
    _, first = take_without_ack(eng, "default", "ghost:1:aa")
    _, second = take_without_ack(eng, "default", "ghost:1:aa")
    stop = api.post(f"/api/v1/requests/{rid}/items/{first}/stop")
    assert stop.status_code == 200 and stop.json() == {"id": rid, "entry": first, "stopped": True}
    assert (last_entry().action, last_entry().target, last_entry().count) == ("stop_item", "#0", 1)
    requeued = api.post(f"/api/v1/requests/{rid}/requeue", {"entries": [second]})
    assert requeued.json() == {"id": rid, "count": 1}
    assert eng.redis.zscore(eng.keys.request(rid).leases, second) <= time.time() * 1000
    everything = api.post(f"/api/v1/requests/{rid}/requeue")
    assert everything.json()["count"] == 2
    assert [e.action for e in AuditEntry.objects.order_by("id")] == ["stop_item", "requeue", "requeue"]
    burst(eng)
    assert api.post(f"/api/v1/requests/{rid}/items/{first}/stop").status_code == 409  # finished


def test_a_stop_of_an_item_not_running_is_409(eng, api):
    rid = services.submit("default", "echo", ["a", "b"], delay=600).id
    entry = eng.redis.xrange(eng.keys.request(rid).items, count=1)[0][0]
    answer = api.post(f"/api/v1/requests/{rid}/items/{entry}/stop")
    assert answer.status_code == 409 and "not running" in answer.json()["error"]
    assert not AuditEntry.objects.exists()


def test_run_now_makes_a_scheduled_request_due(eng, api):
    rid = services.submit("default", "echo", ["a", "b"], delay=600).id
    answer = api.post(f"/api/v1/requests/{rid}/run-now")
    assert answer.status_code == 200 and answer.json() == {"id": rid}
    burst(eng)
    assert eng.status(rid)["state"] == "completed"
    assert (last_entry().action, last_entry().request_id) == ("run_now", rid)
    assert api.post(f"/api/v1/requests/{rid}/run-now").status_code == 409


def test_pause_and_resume_a_queue(eng, api):
    Queue.objects.create(name="reports")
    assert api.post("/api/v1/queues/reports/pause").json() == {"name": "reports", "paused": True}
    assert Queue.objects.get(name="reports").paused and eng.queue_config("reports").paused
    assert api.post("/api/v1/queues/reports/resume").json() == {"name": "reports", "paused": False}
    assert not eng.queue_config("reports").paused
    assert [(e.action, e.queue) for e in AuditEntry.objects.order_by("id")] == [
        ("pause_queue", "reports"), ("resume_queue", "reports")]
    assert api.post("/api/v1/queues/nowhere/pause").status_code == 404


def test_periodic_run_pause_and_resume(eng, api):
    obj = PeriodicRequest.objects.create(name="nightly", queue_id="default", processor="echo", items="a\nb",
                                         interval_seconds=3600)
    ran = api.post("/api/v1/periodic/nightly/run")
    assert ran.status_code == 200 and eng.status(ran.json()["id"])["total"] == 2
    assert api.post("/api/v1/periodic/nightly/pause").json() == {"name": "nightly", "enabled": False}
    obj.refresh_from_db()
    assert not obj.enabled
    assert api.post("/api/v1/periodic/nightly/resume").json()["enabled"] is True
    assert [e.action for e in AuditEntry.objects.order_by("id")] == ["run_periodic", "pause_periodic",
                                                                     "resume_periodic"]
    assert api.post("/api/v1/periodic/nope/run").status_code == 404


@pytest.mark.parametrize("path,scope", OPERATIONS)
def test_each_operation_needs_its_scope(eng, path, scope):
    other = "read submit" if scope == "steer" else "read steer"
    api = Api(token_for(f"narrow-{scope}-{len(path)}", scopes=other))
    url = "/api/v1" + path.format(rid="r1", entry="1-0", name="default")
    answer = api.post(url)
    assert answer.status_code == 403 and answer.json()["code"] == "scope", (url, answer.content)
    assert Api(None).post(url).status_code == 401
    viewer = Api(token_for(f"viewer-{scope}-{len(path)}", scopes="read", act=False))
    assert viewer.post(url).status_code == 403
    assert not AuditEntry.objects.exists()


def test_unknown_and_finished_requests(eng, api):
    assert api.post("/api/v1/requests/nosuch/retry").status_code == 404
    assert api.post("/api/v1/requests/bad%20id/retry").status_code == 404
    rid = services.submit("default", "echo", ["a"]).id
    api.post(f"/api/v1/requests/{rid}/cancel")
    assert api.post(f"/api/v1/requests/{rid}/requeue").status_code == 409
    assert last_entry().action == "cancel" and last_entry().source == "api"


@pytest.mark.slow
def test_bad_input_never_gets_a_5xx(eng, api):
    rid = dead_request(eng, 1)
    bodies = st.one_of(
        st.binary(max_size=40),
        st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8), lambda kids:
                     st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
                     max_leaves=6).map(lambda v: json.dumps(v).encode()),
        st.lists(st.text(max_size=25), max_size=4).map(lambda v: json.dumps({"entries": v}).encode()))
    names = st.one_of(st.sampled_from([rid, "default", "nosuch", "1-0"]), st.text(max_size=12))

    @hsettings(max_examples=150, deadline=None, derandomize=True, database=None,
               suppress_health_check=list(HealthCheck))
    @given(path=st.sampled_from([p for p, _ in OPERATIONS]), name=names, entry=names, raw=bodies)
    def call(path, name, entry, raw):
        from urllib.parse import quote
        url = "/api/v1" + path.format(rid=quote(name, safe=""), entry=quote(entry, safe=""),
                                      name=quote(name, safe=""))
        answer = api.client.generic("POST", url, data=raw, content_type="application/json",
                                    headers={"Authorization": f"Bearer {api.key}"})
        assert answer.status_code < 500, (url, raw, answer.content[:300])
        assert b"Traceback" not in answer.content
        if answer.status_code >= 400:
            assert set(answer.json()) == {"error", "code"}

    call()
    # accepted input round-trips: a well-formed list of entries is taken as given
    entry = eng.dead_letters(rid)[0]["entry"] if eng.dead_letters(rid) else None
    if entry:
        assert api.post(f"/api/v1/requests/{rid}/retry", {"entries": [entry]}).json()["count"] == 1


def test_an_item_to_stop_may_be_named_by_its_index(eng, api):
    rid = services.submit("default", "echo", ["a", "b"], concurrency=1).id
    register_worker(eng, "ghost:2:bb", time.time() * 1000)
    _, entry = take_without_ack(eng, "default", "ghost:2:bb")
    assert api.post(f"/api/v1/requests/{rid}/items/1/stop").status_code == 409  # #1 waits: not running
    stopped = api.post(f"/api/v1/requests/{rid}/items/0/stop")
    assert stopped.status_code == 200 and stopped.json() == {"id": rid, "entry": entry, "stopped": True}
    assert api.post(f"/api/v1/requests/{rid}/items/7/stop").status_code == 404  # past its last item
    assert api.post(f"/api/v1/requests/{rid}/items/x1/stop").status_code == 404
