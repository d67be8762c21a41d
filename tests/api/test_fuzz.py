"""Property-based tests (hypothesis) of the API's input handling: random JSON,
strings with lone surrogates, wrong types, raw bytes. Whatever comes in, the
answer is never a 5xx or a traceback, errors have the one JSON shape, and
every accepted submission round-trips exactly through its results."""
from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from queueadmin.core import services
from tests.api_helpers import Api, results, run_burst, token_for

pytestmark = [pytest.mark.django_db]

FIELDS = ["queue", "processor", "items", "priority", "concurrency", "delay_seconds", "expires_in_seconds",
          "time_limit", "dedup_key", "dedup"]
FUZZ = hsettings(max_examples=100, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FUZZ_FIXTURE = hsettings(FUZZ, max_examples=60,  # a test's fixtures serve all its examples: that is the point here
                         suppress_health_check=[*FUZZ.suppress_health_check, HealthCheck.function_scoped_fixture])

# text with lone surrogates, NUL, right-to-left marks and markup among ordinary characters
awkward_chars = st.sampled_from(["\ud800", "\udfff", "\udc00", "\x00", "\u202e", "\u200f", "<b>", "&amp;", "\ufeff",
                           "\U0001F600", "\\", '"'])
texts = st.lists(st.characters() | st.characters() | awkward_chars, max_size=12).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12)


def field_values(name):
    """A plausible value of the right type mostly, anything sometimes."""
    good = {"queue": st.sampled_from(["default", "nope", ""]) | texts,
            "processor": st.sampled_from(["echo", "echo", "uppercase", "nope"]),
            "items": st.lists(json_values, min_size=1, max_size=5),
            "priority": st.integers(-5, 105), "concurrency": st.integers(-1, 20_000),
            "delay_seconds": st.floats(-1, 10, allow_nan=False), "expires_in_seconds": st.floats(-1, 100),
            "time_limit": st.floats(-1, 100, allow_nan=False), "dedup_key": texts, "dedup": st.booleans()}
    return good.get(name, json_values) | json_values


REQUIRED = ("queue", "processor", "items")
chaotic = st.fixed_dictionaries(
    {"queue": st.just("default") | field_values("queue"), "processor": st.just("echo") | field_values("processor"),
     "items": st.lists(json_values, min_size=1, max_size=5) | field_values("items")},
    optional={name: field_values(name) for name in FIELDS + ["junk"] if name not in REQUIRED})
plausible = st.fixed_dictionaries(  # mostly accepted: what round-trips is checked on these
    {"queue": st.just("default"), "processor": st.just("echo"), "items": st.lists(json_values, min_size=1, max_size=5),
     "dedup": st.booleans()},
    optional={"priority": st.integers(0, 99), "concurrency": st.integers(1, 50), "time_limit": st.integers(0, 60),
              "dedup_key": texts.filter(bool)})
submissions = plausible | chaotic


def encodings(body) -> st.SearchStrategy[bytes]:
    """JSON text escaping every non-ASCII character (surrogates become \\udXXX escapes),
    or raw UTF-8 where surrogates pass through as bytes that are not UTF-8."""
    return st.sampled_from([json.dumps(body).encode(),
                            json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")])


@pytest.fixture
def api(redis_url, db):
    services.sync_queues()
    return Api(token_for("fuzzer"))


def check_shape(response, where):
    assert response.status_code < 500, (where, response.status_code, response.content[:500])
    if response.streaming:
        return
    assert response["Content-Type"].startswith("application/json"), where
    body = response.json()
    assert b"Traceback" not in response.content
    if response.status_code >= 400:
        assert set(body) == {"error", "code"}, body
        assert body["error"] and body["code"].replace("_", "").isalpha(), body


@pytest.mark.slow
def test_submissions_never_fail_badly_and_accepted_ones_round_trip(api):
    accepted, codes = {}, set()

    @FUZZ
    @given(body=submissions, data=st.data())
    def submit(body, data):
        raw = data.draw(encodings(body))
        response = post_raw(api, raw)
        check_shape(response, body)
        codes.add(response.json().get("code", response.status_code))
        if response.status_code in (200, 201):
            answer = response.json()
            if not answer["duplicate"] and body["processor"] == "echo" and answer["state"] == "queued":
                accepted[answer["id"]] = body["items"]

    submit()
    assert len(accepted) > 20, "the strategy should produce many valid submissions"
    assert {"bad_unicode", "malformed_json", "invalid", 201} <= codes, codes
    run_burst()
    for rid, items in accepted.items():
        assert [r["result"] for r in results(api, rid)] == items, rid


def post_raw(api, raw: bytes):
    return api.client.generic("POST", "/api/v1/requests", data=raw, content_type="application/json",
                              headers={"Authorization": f"Bearer {api.key}"})


@pytest.mark.slow
def test_any_bytes_or_json_at_any_operation(api):
    rid = api.post("/api/v1/requests", {"queue": "default", "processor": "echo", "items": [1]}).json()["id"]
    urls = ["/api/v1/requests", f"/api/v1/requests/{rid}/priority", f"/api/v1/requests/{rid}/concurrency",
            f"/api/v1/requests/{rid}/cancel", f"/api/v1/requests/{rid}", "/api/v1/queues", "/api/requests",
            f"/api/requests/{rid}/results", "/api/v1/requests?limit=2&cursor=x"]
    bodies = st.one_of(st.binary(max_size=64), json_values.map(lambda v: json.dumps(v).encode()),
                       st.dictionaries(st.sampled_from(FIELDS + ["priority", "concurrency"]), json_values)
                       .map(lambda v: json.dumps(v).encode()))

    @FUZZ
    @given(method=st.sampled_from(["POST", "POST", "GET", "PUT", "PATCH", "DELETE"]), url=st.sampled_from(urls),
           raw=bodies)
    def call(method, url, raw):
        response = api.client.generic(method, url, data=raw, content_type="application/json",
                                      headers={"Authorization": f"Bearer {api.key}"})
        check_shape(response, (method, url, raw[:100]))

    call()


@pytest.mark.parametrize("field", FIELDS)
def test_every_field_with_every_wrong_type(api, field):
    base = {"queue": "default", "processor": "echo", "items": ["x"], "dedup": False}

    @hsettings(max_examples=25, deadline=None, derandomize=True, database=None)
    @given(value=json_values)
    def wrong(value):
        response = post_raw(api, json.dumps({**base, field: value}).encode())
        check_shape(response, (field, value))
        if response.status_code == 400:
            assert field in response.json()["error"] or response.json()["code"] in ("bad_unicode", "invalid")

    wrong()


# -- the one check of items, and list cursors (issue 20) ---------------------------------------

deep_item_texts = st.one_of(  # JSON text of one item nested around the limit (64), or far past it
    st.builds(lambda v, n: "[" * n + json.dumps(v) + "]" * n, json_values, st.integers(58, 70)),
    st.builds(lambda n: '{"k":' * n + "1" + "}" * n, st.integers(58, 70)),
    st.integers(100, 1100).map(lambda n: "[" * n + "]" * n),
    json_values.map(json.dumps))


@FUZZ_FIXTURE
@given(item=deep_item_texts)
def test_items_get_the_check_every_entry_point_makes(api, item):
    """201 exactly when the engine's check takes the item (the form, the
    command, the Python client and Django Tasks make the same one), with its
    message otherwise; what is taken round-trips."""
    from queueadmin.core.engine.errors import QueueError
    from queueadmin.core.engine.client.limits import check_item

    raw = f'{{"queue":"default","processor":"echo","dedup":false,"items":[{item}]}}'.encode()
    response = post_raw(api, raw)
    check_shape(response, item[:80])
    try:
        value = json.loads(item)
    except RecursionError:  # past the parser's own limit: refused as malformed
        assert response.json()["code"] == "malformed_json"
        return
    try:
        check_item(value, "item 0")
    except QueueError as exc:
        assert response.status_code == 400, response.content[:300]
        if response.json()["code"] != "bad_unicode":  # the body parser names a lone surrogate's place first
            assert response.json()["error"] == str(exc), response.content[:300]
        return
    assert response.status_code == 201, response.content[:300]
    assert services.engine().items(response.json()["id"])[0]["payload"] == value


cursor_values = st.one_of(
    st.lists(st.one_of(st.sampled_from(["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00",
                                        "0001-01-01T00:00:00", "2025-06-01T12:00:00+00:00"]), texts,
                       st.integers(), st.floats(allow_nan=False)), max_size=3),
    json_values)


@FUZZ_FIXTURE
@given(cursor=st.one_of(
    cursor_values.map(lambda v: base64.urlsafe_b64encode(json.dumps(v).encode()).decode().rstrip("=")),
    st.integers(1, 3000).map(lambda n: base64.urlsafe_b64encode(("[" * n + "]" * n).encode()).decode()),
    st.binary(max_size=60).map(lambda b: base64.urlsafe_b64encode(b).decode()),
    st.text(max_size=80)))
def test_list_cursors_are_a_page_or_a_400(api, cursor):
    for url in ("/api/v1/requests", "/api/v1/queues"):
        response = api.client.get(url, {"cursor": cursor}, headers={"Authorization": f"Bearer {api.key}"})
        check_shape(response, (url, cursor[:80]))
        assert response.status_code in (200, 400), response.content[:300]
