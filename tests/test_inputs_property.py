"""Property tests (hypothesis) of the dashboard's submit form and of
`queue_submit`'s input (plain lines, --json lines, file bytes): whatever is
sent, the answer is a page (never a 5xx) or a one-line command error (never
another exception, so never a traceback), and whatever is accepted
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
from queueadmin.core.engine.limits import encode
from queueadmin.core.management.commands.queue_submit import split_lines

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
# a line of "JSON" input: a real JSON value (as ASCII or not), or junk
json_lines = st.one_of(json_values.map(json.dumps), json_values.map(encode), any_text)
# the same as an HTTP form can carry them (lone surrogates only as \ud800 escapes)
form_json_lines = st.one_of(json_values.map(json.dumps), http_text)


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
    if rid:
        assert stored(rid) == [encode(json.loads(line)) for line in form_lines("\n".join(lines))]


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
