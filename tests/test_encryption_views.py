"""Encrypted queues on the Django side (issue 23 part 4): keys from the
QUEUEADMIN settings; the dashboard, the results download and the API show
staff the clear payloads, results, logs and errors while Redis holds none of
them; a value no key opens shows "(encrypted: no key)" on a page that still
works; the admin and the system checks refuse an encrypted queue without
keys; `manage.py queue_reencrypt` moves everything to the newest key. Real
redis-server, Django test client."""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from queueadmin.core import services
from queueadmin.core.engine.features import encryption
from queueadmin.core.models import Queue, RequestRecord
from queueadmin.core.views.item import item_url
from tests.api_helpers import Api, token_for
from tests.engine.test_encryption import KEY_A, KEY_B, assert_no_clear_text, every_value, sealed_ids
from tests.engine_helpers import burst

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def use_keys(settings, *keys):
    settings.QUEUEADMIN = {**(getattr(settings, "QUEUEADMIN", None) or {}), "ENCRYPTION_KEYS": list(keys)}


@pytest.fixture
def keys_a(settings, monkeypatch):
    monkeypatch.delenv(encryption.ENV, raising=False)
    encryption.install(None)  # from the settings, as a deployment has them
    use_keys(settings, KEY_A)
    return settings


@pytest.fixture
def sec(keys_a, eng):
    Queue.objects.create(name="sec", encrypt=True, max_attempts=1)  # saved: pushed to Redis (signals.py)
    assert eng.queue_config("sec").encrypt
    return eng


def test_the_dashboard_and_api_show_staff_clear_values_that_redis_does_not_hold(sec, staff, redis_url):
    rid = services.submit("sec", "uppercase", ["PAYMARK one", "PAYMARK two"]).id
    bad = services.submit("sec", "fail", ["PAYMARK bad"]).id
    assert RequestRecord.objects.get(id=rid).items_preview == ""  # not copied to the database either
    burst(sec, ["sec"])
    assert_no_clear_text(redis_url)

    html = staff.get(reverse("queueadmin:request_detail", args=[rid])).content.decode()
    assert "PAYMARK one" in html and "PAYMARK TWO" in html and "!e1:" not in html
    item = staff.get(item_url(rid, 1)).content.decode()
    assert '<pre class="code">PAYMARK two</pre>' in item and '<pre class="code">PAYMARK TWO</pre>' in item
    dead = staff.get(item_url(bad, 0)).content.decode()
    assert "RuntimeError: fail processor always fails (item: PAYMARK bad)" in dead
    assert "Traceback (most recent call last)" in dead
    lines = [json.loads(x) for x in
             b"".join(staff.get(reverse("queueadmin:request_results", args=[rid])).streaming_content).splitlines()]
    assert [x["result"] for x in lines] == ["PAYMARK ONE", "PAYMARK TWO"]
    api = Api(token_for("reader"))
    body = b"".join(api.get(f"/api/v1/requests/{rid}/results").streaming_content)
    assert [json.loads(x)["result"] for x in body.splitlines()] == ["PAYMARK ONE", "PAYMARK TWO"]


def test_a_value_no_key_opens_shows_so_and_the_page_works(sec, staff, settings):
    rid = services.submit("sec", "uppercase", ["PAYMARK lost"]).id
    burst(sec, ["sec"])
    use_keys(settings, KEY_B)  # A is gone
    response = staff.get(item_url(rid, 0))
    html = response.content.decode()
    assert response.status_code == 200
    assert html.count(encryption.NO_KEY) >= 2 and "PAYMARK" not in html
    assert staff.get(reverse("queueadmin:request_detail", args=[rid])).status_code == 200


def test_queue_reencrypt_moves_everything_to_the_newest_key(sec, staff, settings, redis_url):
    done = services.submit("sec", "uppercase", ["PAYMARK a", "PAYMARK b"]).id
    burst(sec, ["sec"])
    waiting = services.submit("sec", "uppercase", ["PAYMARK c"]).id
    use_keys(settings, KEY_B, KEY_A)
    out = io.StringIO()
    call_command("queue_reencrypt", "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["records"] == 2 and report["payloads"] == 3 and report["in_streams"] == 0
    assert sealed_ids(every_value(redis_url)) == {encryption.Keyring([KEY_B]).primary}
    out = io.StringIO()
    call_command("queue_reencrypt", stdout=out)
    assert "0 result records and 0 payloads" in out.getvalue() and "older keys may be removed" in out.getvalue()

    use_keys(settings, KEY_B)
    html = staff.get(item_url(done, 1)).content.decode()
    assert '<pre class="code">PAYMARK b</pre>' in html and '<pre class="code">PAYMARK B</pre>' in html
    burst(sec, ["sec"])
    assert [r["result"] for r in sec.results(waiting)] == ["PAYMARK C"]
    assert_no_clear_text(redis_url)


def test_queue_reencrypt_without_keys_is_a_clear_error(keys_a, eng, settings):
    use_keys(settings)
    with pytest.raises(CommandError, match="no encryption key is configured"):
        call_command("queue_reencrypt")


def test_the_admin_refuses_an_encrypted_queue_without_keys(keys_a, eng, settings):
    from queueadmin.core.admin.queues import QueueForm

    data = {"name": "sec2", "priority": 50, "concurrency": 10, "lease_seconds": 60, "max_attempts": 3,
            "backoff_seconds": 1, "backoff_max_seconds": 300, "retention_seconds": 86400, "time_limit_seconds": 3600,
            "rate_limit": "", "unrunnable_seconds": 3600, "encrypt": "on"}
    assert QueueForm(data=data).is_valid()
    use_keys(settings)
    form = QueueForm(data=data)
    assert not form.is_valid() and "No encryption key is configured" in str(form.errors["encrypt"])
    use_keys(settings, "not a key")
    form = QueueForm(data=data)
    assert not form.is_valid() and "32 bytes" in str(form.errors["encrypt"])


def test_system_checks_name_missing_and_malformed_keys(keys_a, eng, settings):
    from queueadmin.core.checks import check_encryption

    assert check_encryption() == []
    Queue.objects.create(name="sec", encrypt=True)
    assert check_encryption() == []
    use_keys(settings)
    assert [m.id for m in check_encryption()] == ["queueadmin.E031"]
    use_keys(settings, "zz")
    assert [m.id for m in check_encryption()] == ["queueadmin.E030"]
