"""The API as its OpenAPI schema describes it: the schema validates, every
documented operation answers with a documented status and a body matching
the documented schema (success and errors), the interactive docs are served
with local assets only and no inline script, and today's unversioned paths
answer like /api/v1/."""
from __future__ import annotations

import json
import re

import pytest
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate

from queueadmin.core import services
from tests.api_helpers import Api, run_burst, token_for

pytestmark = [pytest.mark.django_db]

SAMPLE_BODIES = {"SubmitIn": {"queue": "default", "processor": "echo", "items": ["a", {"b": 1}], "dedup": False},
                 "PriorityIn": {"priority": 10}, "ConcurrencyIn": {"concurrency": 3}}


@pytest.fixture
def schema(client):
    response = client.get("/api/openapi.json")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/json")
    return response.json()


def test_the_schema_is_valid_openapi(schema):
    validate(schema)  # raises on any violation of the OpenAPI 3.1 specification
    assert schema["openapi"].startswith("3.1")
    # at least these (other parts of the API add theirs); none outside /api/v1
    assert set(schema["paths"]) >= {"/api/v1/requests", "/api/v1/requests/{rid}", "/api/v1/requests/{rid}/results",
                                    "/api/v1/requests/{rid}/cancel", "/api/v1/requests/{rid}/priority",
                                    "/api/v1/requests/{rid}/concurrency", "/api/v1/queues",
                                    "/api/v1/requests/{rid}/retry", "/api/v1/requests/{rid}/discard",
                                    "/api/v1/requests/{rid}/requeue", "/api/v1/requests/{rid}/items/{entry}/stop",
                                    "/api/v1/requests/{rid}/run-now", "/api/v1/queues/{name}/pause",
                                    "/api/v1/queues/{name}/resume", "/api/v1/periodic/{name}/run",
                                    "/api/v1/periodic/{name}/pause", "/api/v1/periodic/{name}/resume"}
    assert all(path.startswith("/api/v1/") for path in schema["paths"])
    bearer = [s for s in schema["components"]["securitySchemes"].values()]
    assert bearer == [{"type": "http", "scheme": "bearer"}]


def operations(schema):
    for path, methods in schema["paths"].items():
        for method, op in methods.items():
            yield path, method.upper(), op


def check_answer(schema, op, response, where):
    """The status is documented and the body matches the documented schema."""
    documented = op["responses"]
    assert str(response.status_code) in documented, (where, response.status_code, response.content[:300])
    content = documented[str(response.status_code)].get("content", {})
    kind = response["Content-Type"].split(";")[0]
    assert kind in content, (where, kind, list(content))
    validator = OAS31Validator({**content[kind]["schema"], "components": schema["components"]})
    if response.streaming:
        lines = b"".join(response.streaming_content).split(b"\n")
        for line in filter(None, lines):
            validator.validate(json.loads(line))
    else:
        validator.validate(response.json())


FIRST_OPERATIONS = {"/api/v1/requests", "/api/v1/requests/{rid}", "/api/v1/requests/{rid}/results",
                    "/api/v1/requests/{rid}/cancel", "/api/v1/requests/{rid}/priority",
                    "/api/v1/requests/{rid}/concurrency", "/api/v1/queues"}


def test_every_documented_operation_answers_as_documented(engine, api, schema):
    rid = api.post("/api/v1/requests", SAMPLE_BODIES["SubmitIn"]).json()["id"]
    run_burst()
    checked = 0
    for path, method, op in operations(schema):
        if path not in FIRST_OPERATIONS:
            continue  # the later ones need dead letters, items in flight...: their own modules test them
        if path.endswith(("/cancel", "/priority", "/concurrency")):  # a live request for each
            url = path.replace("{rid}", api.post("/api/v1/requests", SAMPLE_BODIES["SubmitIn"]).json()["id"])
        else:
            url = path.replace("{rid}", rid)
        body = None
        if "requestBody" in op:
            ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            body = SAMPLE_BODIES[ref.rsplit("/", 1)[1]]
        answer = api.call(method, url, body)
        assert answer.status_code < 300, (method, url, answer.content[:300])
        check_answer(schema, op, answer, (method, url))
        # and its documented errors: no token, an unknown request, a bad body
        check_answer(schema, op, Api(None).call(method, url, body), (method, url, "no token"))
        if "{rid}" in path:
            check_answer(schema, op, api.call(method, path.replace("{rid}", "0" * 17), body), (method, "unknown"))
        if body is not None:
            check_answer(schema, op, api.call(method, url, raw='{"x": '), (method, url, "bad body"))
        checked += 1
    assert checked == 8


def test_responses_carry_the_documented_fields(engine, api, schema):
    submitted = schema["components"]["schemas"]["SubmittedOut"]["properties"]
    answer = api.post("/api/v1/requests", SAMPLE_BODIES["SubmitIn"]).json()
    assert set(answer) == set(submitted)
    assert answer["state"] == "queued" and answer["total"] == 2


def timeless(page: dict) -> dict:
    """A queue page without the latency, which grows between two calls."""
    return {**page, "queues": [{k: v for k, v in q.items() if k != "latency"} for q in page["queues"]]}


def test_old_paths_answer_like_v1(engine, api):
    rid = api.post("/api/requests", SAMPLE_BODIES["SubmitIn"]).json()["id"]
    assert api.get(f"/api/requests/{rid}").json() == api.get(f"/api/v1/requests/{rid}").json()
    assert timeless(api.get("/api/queues").json()) == timeless(api.get("/api/v1/queues").json())
    response = api.post("/api/v1/requests", {**SAMPLE_BODIES["SubmitIn"], "items": ["v1"]})
    assert response["Location"] == f"/api/v1/requests/{response.json()['id']}"


def test_docs_page_uses_local_assets_and_no_inline_script(client):
    page = client.get("/api/docs")
    assert page.status_code == 200
    html = page.content.decode()
    assert not re.search(r"(src|href)=\"(https?:)?//", html), "an asset from another origin"
    for tag in re.findall(r"<script[^>]*>", html):  # each loads a file, or is a data block (not run)
        assert re.search(r'src="/(static|api/docs/assets)/', tag) or 'type="application/json"' in tag, tag
    assert "on" + "load=" not in html and "onclick=" not in html
    assets = re.findall(r"(?:src|href)=\"(/(?:static|api/docs/assets)/[^\"]+)\"", html)
    assert any(a.endswith("swagger-ui-bundle.js") for a in assets) and len(assets) >= 4
    for asset in assets:
        response = client.get(asset)
        assert response.status_code == 200, asset
        response.close()
    settings_block = re.search(r'<script type="application/json" id="swagger-settings">(.*?)</script>', html, re.S)
    assert json.loads(settings_block[1])["url"] == "/api/openapi.json"


@pytest.mark.browser
@pytest.mark.slow
def test_docs_run_in_a_browser_under_the_content_security_policy():
    """Swagger UI renders every operation with its assets from this server,
    and the strict CSP (no inline script) reports no violation."""
    from playwright.sync_api import sync_playwright

    from tests.api_helpers import ServerThread

    with ServerThread() as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            page = browser.new_page()
            origin = f"http://127.0.0.1:{server.port}"
            problems = []
            page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
            page.on("request", lambda r: None if r.url.startswith(origin) else problems.append(f"left: {r.url}"))
            page.add_init_script("document.addEventListener('securitypolicyviolation', "
                                 "e => console.error('CSP violation', e.violatedDirective, e.blockedURI))")
            response = page.goto(f"{origin}/api/docs")
            assert "script-src 'self'" in response.headers.get("content-security-policy", "")
            page.wait_for_selector(".opblock", timeout=15_000)
            documented = page.request.get(f"{origin}/api/openapi.json").json()["paths"]
            assert page.locator(".opblock").count() == sum(len(methods) for methods in documented.values()) >= 18
            assert problems == []
        finally:
            browser.close()
