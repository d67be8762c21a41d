"""GET /api/v1/requests/{rid}/items/{index} (core/api/items.py): an item
with its attempts, read scope, in the OpenAPI schema; bad ids and indexes
are a JSON 404 or 400, never a 5xx."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from queueadmin.core import services
from queueadmin.core.engine.config import QueueConfig
from tests.api_helpers import Api, run_burst, token_for

pytestmark = pytest.mark.django_db


def test_an_item_with_every_attempt(api, eng):
    eng.define_queue("flaky", QueueConfig(max_attempts=2, backoff_seconds=0))
    rid = api.post("/api/v1/requests", {"queue": "flaky", "processor": "fail", "items": ["x", {"k": [1]}]}).json()["id"]
    while eng.status(rid)["state"] != "failed":
        run_burst(["flaky"])
    body = api.get(f"/api/v1/requests/{rid}/items/1").json()
    assert (body["request"], body["index"], body["status"], body["payload"], body["dead"]) == (rid, 1, "failed",
                                                                                            {"k": [1]}, True)
    assert body["error"].startswith("RuntimeError: fail processor always fails") and "Traceback" in body["traceback"]
    assert [(a["n"], a["outcome"]) for a in body["attempts"]] == [(1, "retried"), (2, "dead")]
    first = body["attempts"][0]
    assert first["worker"] and first["host"] and first["pid"] and first["taken_at"] and first["ran_for"] >= 0
    assert first["why"].startswith("RuntimeError: fail processor always fails")


def test_a_done_item_and_the_errors(api, eng):
    rid = api.post("/api/v1/requests", {"queue": "default", "processor": "uppercase", "items": ["a"]}).json()["id"]
    run_burst()
    body = api.get(f"/api/v1/requests/{rid}/items/0").json()
    assert (body["status"], body["result"], [a["outcome"] for a in body["attempts"]]) == ("done", "A", ["done"])
    assert api.get(f"/api/v1/requests/{rid}/items/1").json()["code"] == "not_found"
    assert api.get(f"/api/v1/requests/{rid}/items/x").status_code == 400
    assert api.get("/api/v1/requests/nope/items/0").status_code == 404
    assert Api(token_for("submitter", scopes=["submit"])).get(f"/api/v1/requests/{rid}/items/0").status_code == 403
    assert Api(None).get(f"/api/v1/requests/{rid}/items/0").status_code == 401


def test_the_operation_is_in_the_schema(client, db):
    paths = client.get("/api/openapi.json").json()["paths"]
    operation = paths["/api/v1/requests/{rid}/items/{index}"]["get"]
    assert "Scope: read" in operation["description"]
    assert set(operation["responses"]) >= {"200", "400", "404"}


@pytest.mark.slow
def test_any_request_id_or_index_is_an_item_or_a_json_4xx(api, eng):
    rid = services.submit("default", "uppercase", ["a", "b"]).id
    run_burst()
    parts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(
        lambda s: not set(s) & set("/?#%\x00"))

    @hsettings(max_examples=80, deadline=None, derandomize=True, database=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(rid_part=st.one_of(st.just(rid), parts), index=st.one_of(st.integers(-3, 5).map(str), parts))
    def call(rid_part, index):
        response = api.get(f"/api/v1/requests/{rid_part}/items/{index}")
        assert response.status_code in (200, 400, 404), (rid_part, index, response.status_code, response.content)
        assert response["Content-Type"].startswith("application/json")
        body = response.json()
        if response.status_code == 200:  # accepted input names that very item
            assert (body["request"], body["index"]) == (rid, int(index)) and index in ("0", "1")
        else:
            assert set(body) == {"error", "code"}

    call()
