"""Property tests (hypothesis) of every entry point's input: the dashboard's
submit form, `queue_submit` (plain lines, --json lines, file bytes), the
Python client, Django Tasks, periodic definitions and the request page's
item cursors: whatever is sent, the answer is a page (never a 5xx), a
one-line command error or the entry point's own exception (never another,
so never a traceback); every entry point applies the one check of
core/engine/limits.py (depth, size, NaN and Infinity, lone surrogates), so
each accepts exactly what `check_item` accepts; and whatever is accepted
round-trips exactly. Real redis-server, test database."""
from __future__ import annotations

import io
import json
import uuid

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queueadmin.core import services
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.client.limits import check_item, encode
from queueadmin.core.management.commands.queue_submit import split_lines
from queueadmin.core.tasks import task_backends
from tests.test_tasks import taskapp  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# every code point, lone surrogates included, with the troublesome ones often
special = st.sampled_from(["\ud800", "\udfff", "\x00", "\u202e", "\u200f", "<", "&", "\r", "\n", "\ufeff", "é"])
any_char = st.one_of(special, st.characters(codec=None, categories=None))
# lists joined, not st.text: text() flattens the alphabet and loses the weighting
any_text = st.lists(any_char, max_size=40).map("".join)
# what an HTTP form can carry: no lone surrogates
http_text = st.lists(any_char.filter(lambda c: not "\ud800" <= c <= "\udfff"), max_size=40).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12)


def nest(value, levels: int):
    for _ in range(levels):
        value = [value] if levels % 2 else {"k": value}
    return value


# around the depth limit (limits.MAX_DEPTH = 64): either side of it, and far past Python's recursion limit
deep_values = st.one_of(st.builds(nest, json_values, st.integers(58, 70)), st.builds(nest, st.none(), st.just(3000)))
hostile_values = st.one_of(json_values, json_values, deep_values)
# JSON text nested around the limit, and past the JSON parser's own limit (about 1000 levels)
deep_lines = st.one_of(st.builds(nest, json_values, st.integers(58, 70)).map(json.dumps),
                       st.integers(58, 1200).map(lambda n: "[" * n + "1" + "]" * n))
# a line of "JSON" input: a real JSON value (as ASCII or not), or junk
json_lines = st.one_of(json_values.map(json.dumps), json_values.map(encode), any_text, deep_lines)
# the same as an HTTP form can carry them (lone surrogates only as \ud800 escapes)
form_json_lines = st.one_of(json_values.map(json.dumps), http_text, deep_lines)


def accepted_by_the_check(value) -> bool:
    """What every entry point takes (core/engine/limits.py)."""
    try:
        check_item(value, "item")
    except QueueError:
        return False
    return True


def json_line_ok(line: str) -> bool:
    """A line of JSON input that every entry point takes: JSON (NaN parses,
    and is then refused by the check), within the check's limits."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return accepted_by_the_check(value)


@pytest.fixture
def staff(client, redis_url):
    services.sync_queues()
    client.force_login(User.objects.create_superuser(f"boss{uuid.uuid4().hex[:8]}", "b@example.com", "pw"))
    return client


def stored(rid: str) -> list[str]:
    """A request's items as their JSON text (NaN == NaN, -0.0 != 0)."""
    return [encode(i["payload"]) for i in services.engine().items(rid, count=10_000)]


def submitted(response) -> str | None:
    """The new request's id, or None for a form error; never a 5xx."""
    assert response.status_code in (200, 302), response.status_code
    if response.status_code == 200:
        assert any(mark in response.content for mark in (b'class="err"', b"errorlist", b"msg-error"))
        return None
    return response["Location"].rstrip("/").split("/")[-1]


def form_lines(text: str) -> list[str]:
    """The form's rule: one item per line, blank lines skipped."""
    return [line for line in (raw.rstrip("\r") for raw in text.split("\n")) if line.strip()]


# -- the form --------------------------------------------------------------------------


@FUZZ
@given(text=http_text, key=http_text)
def test_form_text_items(staff, text, key):
    key = f"{key}{uuid.uuid4().hex}"  # never a duplicate of an earlier example's request
    rid = submitted(staff.post(reverse("queueadmin:submit"), {"queue": "default", "processor": "echo", "items": text,
                                                   "dedup_key": key}))
    if rid:
        assert stored(rid) == [encode(x) for x in form_lines(text)]
        assert services.engine().status(rid)["dedup_key"] == key.strip()


@FUZZ
@given(lines=st.lists(form_json_lines, min_size=1, max_size=6))
def test_form_json_items(staff, lines):
    rid = submitted(staff.post(reverse("queueadmin:submit"), {"queue": "default", "processor": "echo",
                                                   "items": "\n".join(lines), "json_items": "on"}))
    kept = form_lines("\n".join(lines))
    assert (rid is not None) == (bool(kept) and all(json_line_ok(line) for line in kept))  # the one check
    if rid:
        assert stored(rid) == [encode(json.loads(line)) for line in kept]


@FUZZ
@given(data=st.binary(max_size=200), as_json=st.booleans())
def test_form_uploaded_bytes(staff, data, as_json):
    fields = {"queue": "default", "processor": "echo", "upload": SimpleUploadedFile("f.txt", data)}
    if as_json:
        fields["json_items"] = "on"
    rid = submitted(staff.post(reverse("queueadmin:submit"), fields))
    if rid:
        lines = form_lines(data.decode("utf-8-sig"))
        assert stored(rid) == [encode(json.loads(x) if as_json else x) for x in lines]


# -- queue_submit ----------------------------------------------------------------------


def queue_submit(source, **options) -> str | None:
    """The request id, or None after a one-line CommandError."""
    out = io.StringIO()
    try:
        call_command("queue_submit", source, processor="echo", stdout=out, **options)
    except CommandError as exc:
        assert "\n" not in str(exc) and str(exc)
        return None
    return out.getvalue().split()[-1]


@FUZZ
@given(text=st.lists(any_char, max_size=80).map("".join))
def test_queue_submit_plain_lines(redis_url, text):
    rid = queue_submit("-", stdin=io.StringIO(text), no_dedup=True)
    if rid:
        assert stored(rid) == [encode(x) for x in split_lines(text)]


@FUZZ
@given(lines=st.lists(json_lines, min_size=1, max_size=6))
def test_queue_submit_json_lines(redis_url, lines):
    text = "\n".join(lines)
    rid = queue_submit("-", stdin=io.StringIO(text), json=True, no_dedup=True)
    lines = split_lines(text)
    assert (rid is not None) == (bool(lines) and all(json_line_ok(x) for x in lines))  # the one check
    if rid:
        assert stored(rid) == [encode(json.loads(x)) for x in split_lines(text)]


@FUZZ
@given(data=st.binary(max_size=200), as_json=st.booleans())
def test_queue_submit_file_bytes(redis_url, tmp_path_factory, data, as_json):
    path = tmp_path_factory.mktemp("fuzz") / "items"
    path.write_bytes(data)
    rid = queue_submit(str(path), json=as_json, no_dedup=True)
    if rid:
        lines = split_lines(data.decode("utf-8"))
        assert stored(rid) == [encode(json.loads(x) if as_json else x) for x in lines]


# -- the Python client, Django Tasks, periodic definitions: the same check ----------------


@FUZZ
@given(value=hostile_values)
def test_the_python_client_takes_what_the_check_takes(redis_url, value):
    eng = services.engine()
    if "default" not in eng.queues():
        services.sync_queues()
    try:
        rid = eng.submit("default", "echo", ["first", value], dedup=False).id
    except QueueError as exc:
        assert not accepted_by_the_check(value)
        with pytest.raises(QueueError) as same:
            check_item(value, "item 1")
        assert str(exc) == str(same.value)  # the one message, whichever entry point
        return
    assert accepted_by_the_check(value)
    assert stored(rid) == ['"first"', encode(value)]


@FUZZ
@given(value=hostile_values)
def test_django_tasks_take_what_the_check_takes(taskapp, value):
    from tests.taskapp import tasks

    payload = {"args": [value], "kwargs": {}}
    try:
        result = tasks.echo.enqueue(value)
    except TypeError as exc:
        assert not accepted_by_the_check(payload) and "must be JSON" in str(exc)
        return
    assert accepted_by_the_check(payload)
    assert encode(task_backends["default"].get_result(result.id).args) == encode([value])


@FUZZ
@given(value=hostile_values)
def test_periodic_definitions_take_what_the_check_takes(redis_url, value):
    from queueadmin.core.engine.features import periodic

    eng = services.engine()
    if "default" not in eng.queues():
        services.sync_queues()
    d = periodic.Definition(name=f"fuzz-{uuid.uuid4().hex[:12]}", queue="default", processor="echo", items=[value],
                            interval=3600)
    try:
        d.check()
    except QueueError:
        assert not accepted_by_the_check(value) or len(encode(value).encode()) > 1024 * 1024 - 64
        return
    assert accepted_by_the_check(value)
    rid = periodic.fire(eng, d, periodic.server_ms(eng) // 1000 * 1000)
    assert stored(rid) == [encode(value)]


# -- the request page's item cursors -----------------------------------------------------


@FUZZ
@given(after=st.one_of(http_text, st.from_regex(r"\A[0-9]{1,22}-[0-9]{1,22}\Z"), st.just("$")),
       before=st.one_of(http_text, st.from_regex(r"\A[0-9]{1,22}-[0-9]{1,22}\Z"), st.just("$")))
def test_the_request_page_takes_any_item_cursor(staff, after, before):
    eng = services.engine()
    rid = getattr(test_the_request_page_takes_any_item_cursor, "rid", None)
    if rid is None or eng.status(rid) is None:
        rid = test_the_request_page_takes_any_item_cursor.rid = eng.submit(
            "default", "echo", [f"i{n}" for n in range(80)], dedup=False).id
    url = reverse("queueadmin:request_detail", args=[rid])
    for params in ({"after": after}, {"before": before}, {"after": after, "before": before}):
        response = staff.get(url, params)
        assert response.status_code == 200, (params, response.status_code)
