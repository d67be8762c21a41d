"""The workers through the API (core/api/workers.py): list them (read),
quiet or stop one (steer), in the OpenAPI schema with their scope, the same
ask and audit entry as the dashboard's buttons, and a clear 4xx, never a
5xx, for anything else. Real redis-server."""
from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from queueadmin.core.audit import AuditEntry
from tests.api_helpers import Api, token_for
from tests.views.test_pages import register

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]

WID = "web1:10707:ab12"


def test_the_operations_are_in_the_schema_with_their_scope(client, db):
    paths = client.get("/api/openapi.json").json()["paths"]
    assert paths["/api/v1/workers"]["get"]["description"].startswith("Scope: read")
    for command in ("quiet", "stop"):
        op = paths["/api/v1/workers/{wid}/" + command]["post"]
        assert op["description"].startswith("Scope: steer") and "audit log" in op["description"]
        assert {"200", "403", "404"} <= set(op["responses"])


def test_list_then_quiet_and_stop_a_worker_audited_as_the_token(engine, api):
    register(engine, WID, host="web1", pid=10707, name="web1:10707", processed=7)
    (w,) = api.get("/api/v1/workers").json()["workers"]
    assert (w["id"], w["name"], w["host"], w["pid"], w["state"], w["processed"]) == (
        WID, "web1:10707", "web1", 10707, "idle", 7)
    resp = api.post(f"/api/v1/workers/{WID}/quiet")
    assert resp.status_code == 200 and resp.json() == {"id": WID, "asked": "quiet"}
    assert engine.redis.get(engine.keys.worker_control(WID)) == "quiet"
    entry = AuditEntry.objects.order_by("-id").first()
    assert (entry.action, entry.source, entry.target) == ("quiet_worker", "api", "worker web1:10707")
    assert api.post(f"/api/v1/workers/{WID}/stop").status_code == 200
    assert engine.redis.get(engine.keys.worker_control(WID)) == "stop"


def test_a_read_token_cannot_steer_and_an_unknown_worker_is_404(engine, api):
    register(engine, WID)
    reader = Api(token_for("reader", scopes=["read"]))
    assert reader.get("/api/v1/workers").status_code == 200
    assert reader.post(f"/api/v1/workers/{WID}/stop").status_code == 403
    assert api.post("/api/v1/workers/nobody:1:aa/stop").json()["code"] == "not_found"
    assert api.get(f"/api/v1/workers/{WID}/stop").status_code == 405
    assert not engine.redis.exists(engine.keys.worker_control(WID))


@hsettings(max_examples=40, deadline=None, derandomize=True,
           suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(wid=st.one_of(st.just(WID), st.text(max_size=60)), command=st.sampled_from(["quiet", "stop", "reboot", ""]))
def test_whatever_the_path_the_answer_is_never_a_5xx(engine, api, wid, command):
    register(engine, WID)
    engine.redis.delete(engine.keys.worker_control(WID))
    resp = api.post(f"/api/v1/workers/{quote(wid, safe='')}/{command}")
    assert resp.status_code < 500  # (a path no route matches, e.g. with a newline, is Django's plain 404)
    accepted = wid == WID and command in ("quiet", "stop")
    assert (resp.status_code == 200) == accepted
    assert engine.redis.get(engine.keys.worker_control(WID)) == (command if accepted else None)
