"""Webhooks end to end: real redis-server, real `manage.py queue_worker`
processes (their sender thread posts), and a local HTTP server of the test
on 127.0.0.1 (loopback explicitly allowed in the test's settings and the
workers' environment). No traffic ever goes anywhere but 127.0.0.1: private
and link-local targets are refused before anything is sent or resolved.
"""
from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from hypothesis import HealthCheck, event, given, settings as hsettings
from hypothesis import strategies as st
from redis.crc import key_slot

from queueadmin.core import services
from queueadmin.core.webhooks import policy as webhooks
from queueadmin.core.engine.features import webhook_store
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.models import ApiToken
from tests.api_helpers import Api, make_user
from tests.engine_helpers import ROOT, WorkerProcs, wait_for

pytestmark = pytest.mark.django_db

SITE_SECRET = "whsec_site-secret-of-the-tests"
PRIVATE = ["http://10.0.0.1/hook", "http://192.168.1.1:8080/x", "http://169.254.169.254/latest/meta-data/",
           "http://[::1]:9/", "http://[::ffff:10.0.0.1]/", "http://0.0.0.0/", "http://100.64.0.1/",
           "http://224.0.0.1/", "http://[fe80::1]/", "http://[fc00::1]/", "https://172.16.5.4/"]


# -- a local receiver ----------------------------------------------------------------------


class Hook:
    """An HTTP server on 127.0.0.1 that records each POST and answers with the
    next status code planned for its path (200 when none is left)."""

    def __init__(self, plan: dict[str, list[int]] | None = None):
        self.plan = {k: list(v) for k, v in (plan or {}).items()}
        self.received: list[dict] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hook.received.append({"path": self.path, "headers": dict(self.headers), "body": body})
                codes = hook.plan.get(self.path.partition("?")[0], [])
                self.send_response(codes.pop(0) if codes else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def to(self, path: str) -> list[dict]:
        return [r for r in self.received if r["path"].partition("?")[0] == path]


@pytest.fixture
def hook():
    h = Hook()
    h.thread.start()
    yield h
    h.server.shutdown()
    h.server.server_close()


@pytest.fixture
def allowed(settings, redis_url):
    """Loopback allowed for webhooks in this process, the site secret known; queues in Redis."""
    settings.QUEUEADMIN = {**settings.QUEUEADMIN, "WEBHOOK_ALLOWED_HOSTS": ["127.0.0.1"],
                           "WEBHOOK_SECRET": SITE_SECRET}
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    services.sync_queues()
    services.engine().define_queue("once", QueueConfig(max_attempts=1))
    return settings


@pytest.fixture
def procs(redis_url, worker_db, tmp_path):
    """Worker processes whose sender allows loopback and retries after 0.2 s."""
    made = []

    def start(queues="default", allowed_hosts="127.0.0.1"):
        p = WorkerProcs(redis_url, worker_db, tmp_path / f"w{len(made)}", QUEUEADMIN_WEBHOOK_SECRET=SITE_SECRET,
                        QUEUEADMIN_WEBHOOK_ALLOWED_HOSTS=allowed_hosts, QUEUEADMIN_WEBHOOK_BACKOFF_SECONDS="0.2")
        p.log_dir.mkdir()
        p.start(queues)
        made.append(p)
        return p

    yield start
    for p in made:
        p.stop_all()


def verified(received: dict, secret: str) -> dict:
    """The body, once its signature checks out (as a receiver would check it)."""
    expected = "sha256=" + hmac.new(secret.encode(), received["body"], hashlib.sha256).hexdigest()
    assert hmac.compare_digest(received["headers"]["X-Queueadmin-Signature"], expected)
    assert received["headers"]["Content-Type"] == "application/json"
    return json.loads(received["body"])


def deliveries(rid: str) -> list[dict]:
    return webhook_store.of_request(services.engine(), rid)


def settled(rid: str, state: str):
    return lambda: (d := deliveries(rid)) and d[0]["state"] == state and d[0]


# -- delivered, signed, retried ------------------------------------------------------------


@pytest.mark.slow
def test_completion_and_failure_are_posted_signed_and_retried_after_a_500(allowed, hook, procs, admin_client):
    hook.plan = {"/done": [500], "/failed": []}
    ok = services.submit("default", "uppercase", ["a", "b"], callback_url=hook.url + "/done?tag=1")
    bad = services.submit("once", "fail", ["x"], callback_url=hook.url + "/failed")
    procs("default,once")

    wait_for(lambda: len(hook.to("/done")) >= 2 and hook.to("/failed"), timeout=15, message="webhooks")
    first, second = hook.to("/done")
    body = verified(first, SITE_SECRET)
    assert verified(second, SITE_SECRET) == body and second["body"] == first["body"]  # the same bytes, again
    assert body["id"] == ok.id and body["state"] == "completed" and body["event"] == "request.finished"
    assert (body["queue"], body["processor"], body["total"], body["done"], body["failed"]) == \
        ("default", "uppercase", 2, 2, 0)
    assert body["finished_at"] >= body["started_at"] >= body["created_at"] > 0
    assert first["path"] == "/done?tag=1"
    assert first["headers"]["X-Queueadmin-Delivery"] == second["headers"]["X-Queueadmin-Delivery"] == \
        body["delivery"]
    assert (first["headers"]["X-Queueadmin-Attempt"], second["headers"]["X-Queueadmin-Attempt"]) == ("1", "2")
    assert abs(int(second["headers"]["X-Queueadmin-Timestamp"]) - time.time()) < 30

    failed = verified(hook.to("/failed")[0], SITE_SECRET)
    assert (failed["id"], failed["state"], failed["failed"]) == (bad.id, "failed", 1)

    record = wait_for(settled(ok.id, "delivered"), timeout=5, message="delivered")
    assert [a.get("status") for a in record["log"]] == [500, 200] and record["attempts"] == 2
    time.sleep(0.6)  # three backoffs: a delivered webhook is not sent again
    assert len(hook.to("/done")) == 2 and len(hook.to("/failed")) == 1

    page = admin_client.get(reverse("queueadmin:request_detail", args=[ok.id])).content.decode()
    assert 'id="webhooks"' in page and "HTTP 500" in page and "HTTP 200" in page and "delivered" in page


@pytest.mark.slow
def test_api_token_secret_signs_and_cancellation_notifies(allowed, hook, procs, worker_db):
    token, key = ApiToken.issue(make_user("producer", act=True), "hooks", scopes=["read", "submit", "steer"])
    _mirror_token(token, worker_db)  # the workers' database knows the token, as one shared database would
    api = Api(key)
    answer = api.post("/api/v1/requests", {"queue": "default", "processor": "sleep", "items": [30],
                                           "delay_seconds": 600, "callback_url": hook.url + "/hook"})
    assert answer.status_code == 201, answer.content
    rid = answer.json()["id"]
    assert api.get(f"/api/v1/requests/{rid}").json()["callback_url"] == hook.url + "/hook"
    procs()
    assert api.post(f"/api/v1/requests/{rid}/cancel").status_code == 200

    wait_for(lambda: hook.to("/hook"), timeout=10, message="the cancellation's webhook")
    body = verified(hook.to("/hook")[0], token.webhook_secret)
    assert (body["id"], body["state"], body["done"]) == (rid, "cancelled", 0)
    with pytest.raises(AssertionError):
        verified(hook.to("/hook")[0], SITE_SECRET)
    wait_for(settled(rid, "delivered"), timeout=5, message="delivered")
    assert len(hook.to("/hook")) == 1


@pytest.mark.slow
def test_each_webhook_is_sent_once_by_a_pool_of_workers(allowed, hook, procs):
    """Two forked worker processes and a third worker, each with its sender,
    compete for the retries (every first attempt gets a 500): every attempt
    of every webhook arrives exactly once."""
    hook.plan = {f"/n/{n}": [500] for n in range(30)}
    procs().start("default", 2)  # a second start: a pool of two beside the first
    client = services.engine()
    wait_for(lambda: client.redis.zcard(client.keys.workers) == 3, timeout=10, message="3 workers")
    subs = [services.submit("default", "echo", [n], callback_url=f"{hook.url}/n/{n}") for n in range(30)]
    wait_for(lambda: len(hook.received) >= 60, timeout=15, message="60 attempts")
    time.sleep(1.5)  # more than a sender's poll: any repeated send would have come
    sent = [(r["headers"]["X-Queueadmin-Delivery"], r["headers"]["X-Queueadmin-Attempt"]) for r in hook.received]
    assert len(sent) == len(set(sent)) == 60 and {a for _, a in sent} == {"1", "2"}
    assert sorted({json.loads(r["body"])["id"] for r in hook.received}) == sorted(s.id for s in subs)


def _mirror_token(token: ApiToken, db_path) -> None:
    code = ("from django.contrib.auth.models import User; from queueadmin.core.models import ApiToken; "
            f"u, _ = User.objects.get_or_create(username='mirror{token.pk}'); "
            f"ApiToken.objects.update_or_create(pk={token.pk}, defaults=dict(user=u, key_hash='{token.key_hash}', "
            f"prefix='mirror', scopes='read', webhook_secret='{token.webhook_secret}'))")
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "shell", "-c", code], cwd=ROOT, check=True,
                   env={**os.environ, "DATABASE_PATH": str(db_path)}, capture_output=True)


@pytest.mark.slow
def test_target_is_checked_again_at_delivery(allowed, hook, procs):
    """Allowed here at submission, not by the workers' settings when sending:
    nothing is sent, the delivery is closed as refused."""
    sub = services.submit("default", "echo", ["a"], callback_url=hook.url + "/late")
    procs(allowed_hosts="hooks.example.com")
    record = wait_for(settled(sub.id, "refused"), timeout=10, message="refused at delivery")
    assert "not allowed" in record["log"][0]["error"] and record["attempts"] == 1
    time.sleep(0.5)
    assert hook.received == []


# -- refused at submission -------------------------------------------------------------------


@pytest.fixture
def api(allowed):
    return Api(ApiToken.issue(make_user("submitter", act=True), "t", scopes=["read", "submit", "steer"])[1])


def nothing_queued() -> bool:
    client = services.engine()
    return client.redis.zcard(client.keys.queue("default").index) == 0 and \
        client.redis.zcard(client.keys.webhooks_due) == 0 and client.redis.zcard(client.keys.webhook_targets) == 0


@pytest.mark.parametrize("url", PRIVATE)
def test_private_addresses_are_refused_at_submission(api, allowed, url):
    allowed.QUEUEADMIN = {**allowed.QUEUEADMIN, "WEBHOOK_ALLOWED_HOSTS": ["*", "127.0.0.1"]}
    answer = api.post("/api/v1/requests", {"queue": "default", "processor": "echo", "items": [1],
                                           "callback_url": url})
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "invalid" and "callback_url refused" in answer.json()["error"]
    assert "address" in answer.json()["error"]
    assert nothing_queued()


@pytest.mark.parametrize("url, why", [
    ("ftp://127.0.0.1/x", "http:// or https://"), ("http://user:pw@127.0.0.1/", "user name or password"),
    ("http:///nohost", "no host"), ("http://127.0.0.1:0/", "port"), ("http://127.0.0.1:99999/", "malformed"),
    ("http://[::1/", "malformed"), ("http://127.0.0.1/a b", "spaces"), ("javascript:alert(1)", "http://"),
    ("http://localhost:8000/", "not allowed"), ("http://10.0.0.1/", "not allowed"),
])
def test_malformed_or_unlisted_targets_are_refused(api, url, why):
    answer = api.post("/api/v1/requests", {"queue": "default", "processor": "echo", "items": [1],
                                           "callback_url": url})
    assert answer.status_code == 400 and why in answer.json()["error"], answer.content
    assert nothing_queued()


def test_loopback_is_refused_unless_allowed(api, allowed, hook):
    allowed.QUEUEADMIN = {**allowed.QUEUEADMIN, "WEBHOOK_ALLOWED_HOSTS": []}  # the default: public hosts only
    answer = api.post("/api/v1/requests", {"queue": "default", "processor": "echo", "items": [1],
                                           "callback_url": hook.url + "/x"})
    assert answer.status_code == 400 and "loopback" in answer.json()["error"]
    assert webhooks.refusal("http://localhost:1/") is not None  # resolved through /etc/hosts: loopback
    assert nothing_queued()


def test_a_token_from_before_webhooks_cannot_ask_for_one(api, allowed, hook):
    token = ApiToken.objects.get(name="t")
    ApiToken.objects.filter(pk=token.pk).update(webhook_secret="")
    answer = api.post("/api/v1/requests", {"queue": "default", "processor": "echo", "items": [1],
                                           "callback_url": hook.url + "/x"})
    assert answer.status_code == 400 and "issue a new token" in answer.json()["error"]


def test_form_and_command_refuse_and_accept(allowed, admin_client, hook):
    form = {"queue": "default", "processor": "echo", "items": "a", "callback_url": "http://169.254.169.254/"}
    page = admin_client.post(reverse("queueadmin:submit"), form)
    assert page.status_code == 200 and b"not allowed for webhooks" in page.content
    with pytest.raises(CommandError, match="--callback-url refused: .*192.168.1.1"):
        call_command("queue_submit", "-", "--processor", "echo", "--callback-url", "http://192.168.1.1/",
                     stdin=io.StringIO("a\n"), stdout=io.StringIO())
    assert nothing_queued()

    answer = admin_client.post(reverse("queueadmin:submit"), {**form, "callback_url": hook.url + "/form"})
    assert answer.status_code == 302
    rid = answer["Location"].rstrip("/").rpartition("/")[2]
    assert services.engine().status(rid)["callback_url"] == hook.url + "/form"
    assert "callback_signer" not in services.engine().status(rid)  # the site signs it
    out = io.StringIO()
    call_command("queue_submit", "-", "--processor", "echo", "--callback-url", hook.url + "/cmd",
                 stdin=io.StringIO("b\n"), stdout=out)
    assert services.engine().status(out.getvalue().split()[-1])["callback_url"] == hook.url + "/cmd"


# -- bad callback URLs at the API: never a 5xx ------------------------------------------------

hosts = st.sampled_from(["127.0.0.1", "10.0.0.1", "[::1]", "localhost", "169.254.169.254", "0", "2130706433",
                         "127.1", "[::ffff:127.0.0.1]", "xn--", "é.example", "a..b", "-", "%00", "[", "]"])
urls = st.one_of(
    st.text(max_size=60),
    st.builds(lambda scheme, host, port, path: f"{scheme}://{host}{port}{path}",
              st.sampled_from(["http", "https", "HTTP", "ftp", "file", "", "javascript"]), hosts,
              st.sampled_from(["", ":80", ":0", ":65536", ":-1", ":x", ":8000"]), st.text(max_size=20)),
    st.builds(lambda scheme, port, path: f"{scheme}://127.0.0.1:{port}/{path}", st.sampled_from(["http", "https"]),
              st.integers(1, 65535), st.text(max_size=30)),  # allowed: accepted unless the path is bad
    st.integers(), st.none(), st.lists(st.text(max_size=3), max_size=2), st.booleans())


@hsettings(max_examples=120, deadline=None, derandomize=True,
           suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(url=urls)
def test_bad_callback_urls_never_give_a_5xx(api, url):
    """Only 127.0.0.1 is allowed here, so no host name is ever looked up."""
    answer = api.post("/api/v1/requests", {"queue": "default", "processor": "echo", "items": [str(url)],
                                           "callback_url": url, "dedup": False})
    assert answer.status_code in (201, 400), (answer.status_code, answer.content)
    event(f"status {answer.status_code}")
    if answer.status_code == 201:
        rid = answer.json()["id"]
        assert api.get(f"/api/v1/requests/{rid}").json()["callback_url"] == url
        assert url is None or webhooks.refusal(url) is None  # null: no webhook
    else:
        assert answer.json()["code"] in ("invalid", "too_long", "bad_unicode")


# -- the store: made once, claimed once -------------------------------------------------------


def test_delivery_is_made_once_and_taken_by_one_sender(allowed, hook):
    client = services.engine()
    k = client.keys
    sub = services.submit("default", "echo", ["a"], callback_url=hook.url + "/x")
    client.cancel(sub.id)  # makes the delivery
    status = client.status(sub.id)
    did = webhook_store.delivery_id(status)
    assert webhook_store.enqueue(client, status) == did  # again: nothing new
    services.record(status)
    tid, name = webhook_store.target_of(hook.url + "/x")
    assert name == f"127.0.0.1:{hook.server.server_address[1]}"
    assert client.redis.zrange(k.webhook_targets, 0, -1) == [tid] and len(deliveries(sub.id)) == 1
    assert client.redis.zrange(k.webhook_target_queue(tid), 0, -1) == [did]

    takes = []
    threads = [threading.Thread(target=lambda: takes.append(webhook_store.take(client, tid, 60_000)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [got for got in takes if got]
    assert len(won) == 1 and won[0][1] == did
    deadline = won[0][0]
    assert webhook_store.due_targets(client, False, 10) == []  # taken: not due for anyone else
    assert webhook_store.sent(client, did, tid, sub.id, deadline - 1, {"at": 1}, "delivered") == 0  # not its claim
    assert webhook_store.sent(client, did, tid, sub.id, deadline, {"at": 1, "status": 204}, "delivered",
                              news="answered") == 1
    assert webhook_store.sent(client, did, tid, sub.id, deadline, {"at": 2}, "delivered") == 0  # closed
    assert deliveries(sub.id)[0]["state"] == "delivered"
    assert client.redis.zcard(k.webhook_targets) == client.redis.zcard(k.webhook_target_queue(tid)) == 0
    # every script's keys in one slot (Redis Cluster)
    assert len({key_slot(key.encode()) for key in (k.webhooks_due, k.webhook(did), k.webhooks_of(sub.id),
                                                   k.webhooks_watch, k.webhook_targets, k.webhook_targets_slow,
                                                   k.webhook_target(tid), k.webhook_target_queue(tid))}) == 1


def test_a_target_that_times_out_waits_a_doubling_penalty_among_the_slow(allowed):
    """Its deliveries wait together (one penalty for the target, not one per
    delivery); an answer puts it back among the others."""
    client = services.engine()
    k = client.keys
    url = "http://127.0.0.1:9/pit"
    subs = [services.submit("default", "echo", [n], callback_url=url) for n in range(2)]
    for sub in subs:
        client.cancel(sub.id)
    tid, _ = webhook_store.target_of(url)
    penalty = (600, 1000)

    def attempt(news):
        deadline, did = webhook_store.take(client, tid, 60_000)
        assert webhook_store.take(client, tid, 60_000) is None  # one at a time
        now = int(time.time() * 1000)
        assert webhook_store.sent(client, did, tid, did.rpartition("-")[0], deadline, {"at": 1}, "pending", now,
                                  news, penalty) > 0
        return now

    now = attempt("timeout")
    assert client.redis.zrange(k.webhook_targets, 0, -1) == []
    (slow, at), = client.redis.zrange(k.webhook_targets_slow, 0, -1, withscores=True)
    assert slow == tid and now + 500 <= at <= now + 700  # the first penalty, for both its deliveries
    assert webhook_store.due_targets(client, True, 5) == [] and webhook_store.take(client, tid, 60_000) is None
    wait_for(lambda: webhook_store.due_targets(client, True, 5) == [tid], timeout=3, message="penalty over")
    now = attempt("timeout")
    at = client.redis.zscore(k.webhook_targets_slow, tid)
    assert now + 900 <= at <= now + 1100  # doubled, at most the longest
    wait_for(lambda: webhook_store.due_targets(client, True, 5) == [tid], timeout=3, message="penalty over")
    attempt("answered")
    assert client.redis.zrange(k.webhook_targets_slow, 0, -1) == []
    assert webhook_store.due_targets(client, False, 5) == [tid]


def test_deliveries_an_older_version_left_are_adopted_and_sent(allowed, hook):
    from queueadmin.core.webhooks.sender import Sender

    client = services.engine()
    k = client.keys
    sub = client.submit("default", "echo", ["a"])
    status = {**client.status(sub.id), "state": "cancelled", "finished_at": time.time(),
              "callback_url": hook.url + "/old"}
    did = webhook_store.delivery_id(status)
    fields = ["request", sub.id, "url", status["callback_url"], "signer", "", "body", webhook_store.body(status, did)]
    client.scripts("webhook_add", [k.webhooks_due, k.webhook(did), k.webhooks_of(sub.id)],  # as before
                   [did, 86_400_000, *fields])
    assert Sender(client).deliver_due() == 1
    assert verified(hook.to("/old")[0], SITE_SECRET)["delivery"] == did
    assert deliveries(sub.id)[0]["state"] == "delivered" and client.redis.zcard(k.webhooks_due) == 0


def test_backoff_doubles_and_gives_up_after_the_day():
    assert [webhook_store.backoff_ms(n, 10, 3600) for n in (1, 2, 3, 10, 20)] == \
        [10_000, 20_000, 40_000, 3_600_000, 3_600_000]
    delivery = {"created": 0}
    assert webhook_store.next_attempt(delivery, 1, 10, 3600, now_ms=1000) == 11_000
    assert webhook_store.next_attempt(delivery, 30, 10, 3600, now_ms=86_400_000 - 1000) is None


def test_a_finish_no_reporter_recorded_is_still_delivered(allowed, hook):
    """The worker that finished the request recorded nothing (as if killed
    before its reporter ran): the watch on requests with a callback makes the
    delivery once it comes due."""
    from queueadmin.core.webhooks.sender import Sender
    from tests.engine_helpers import burst

    client = services.engine()
    sub = client.submit("default", "uppercase", ["a"], callback_url=hook.url + "/swept")  # Python: site secret
    burst(client)  # no history callback: nothing recorded, no delivery made
    assert client.status(sub.id)["state"] == "completed" and deliveries(sub.id) == []
    sender = Sender(client)
    assert sender.deliver_due() == 0  # not due yet: the reporter normally makes it at once
    client.redis.zadd(client.keys.webhooks_watch, {sub.id: 0})  # ... the watch's 30 s have passed
    assert sender.deliver_due() == 1
    body = verified(hook.to("/swept")[0], SITE_SECRET)
    assert (body["id"], body["state"], body["done"]) == (sub.id, "completed", 1)
    assert deliveries(sub.id)[0]["state"] == "delivered"
    assert client.redis.zcard(client.keys.webhooks_watch) == 0
    assert sender.deliver_due() == 0 and len(hook.to("/swept")) == 1


def _trickler(stop: threading.Event):
    """A receiver that answers one header byte every 0.1 s, forever: each read
    succeeds, so only the attempt's overall deadline can end it."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = server.accept()
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        while not stop.wait(0.1):
            try:
                conn.sendall(b"a")
            except OSError:
                break
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_slow_or_absent_receivers_fail_the_attempt_in_bounded_time(allowed):
    """Both attempts end quickly with an error and are tried again later."""
    from queueadmin.core.webhooks.sender import Sender

    allowed.QUEUEADMIN = {**allowed.QUEUEADMIN, "WEBHOOK_TIMEOUT_SECONDS": 0.3}
    client, stop = services.engine(), threading.Event()
    server = _trickler(stop)
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens there any more
    try:
        slow = client.submit("default", "echo", ["a"], callback_url=f"http://127.0.0.1:{server.getsockname()[1]}/")
        gone = client.submit("default", "echo", ["b"], callback_url=f"http://127.0.0.1:{closed_port}/")
        for sub in (slow, gone):
            client.cancel(sub.id)
        started = time.monotonic()
        assert Sender(client).deliver_due() == 2
        assert time.monotonic() - started < 3  # the trickler is cut at 3 x 0.3 s
    finally:
        stop.set()
        server.close()
    for sub, error in ((slow, "timed out"), (gone, "connection refused")):
        record = deliveries(sub.id)[0]
        assert record["state"] == "pending" and record["log"][0]["error"] == error, record
        assert record["next_at"] > time.time()


# -- fair between targets, bounded in time (issue 20) ------------------------------------------


class Tarpit:
    """A receiver on 127.0.0.1 that accepts and then never answers ("silent")
    or answers one byte of its status line a second ("drip"); it counts the
    connections it holds at once."""

    def __init__(self, kind: str, stop: threading.Event):
        self.kind, self.stop = kind, stop
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.open = self.most = self.accepted = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}/hook"

    def serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            with self.lock:
                self.open += 1
                self.accepted += 1
                self.most = max(self.most, self.open)
            threading.Thread(target=self.hold, args=(conn,), daemon=True).start()
        self.server.close()

    def hold(self, conn):
        """Until the sender gives up (its end of the connection closes)."""
        import select

        line, last = iter(b"HTTP/1.1 200 OK\r\n"), time.monotonic()
        try:
            while not self.stop.is_set():
                if select.select([conn], [], [], 0.05)[0] and not conn.recv(65536):
                    break
                if self.kind == "drip" and time.monotonic() - last >= 1.0:
                    conn.sendall(bytes([next(line, ord("a"))]))
                    last = time.monotonic()
        except OSError:
            pass
        finally:
            conn.close()
            with self.lock:
                self.open -= 1


@pytest.mark.slow
def test_eight_tarpit_receivers_do_not_delay_another_users_webhook(allowed, hook, procs):
    """Eight receivers that hold every connection (four silent, four dripping
    a byte a second), three deliveries each, beside a fast one: the fast
    one's webhook arrives within a couple of seconds, and again once the
    tarpits are known to be slow and keep coming back. Each tarpit is sent
    one delivery at a time. (One sender thread sending one delivery after
    another, up to 15 s each, took 119 s.)"""
    stop = threading.Event()
    pits = [Tarpit("silent" if n % 2 else "drip", stop) for n in range(8)]
    try:
        procs()
        client = services.engine()
        wait_for(lambda: client.redis.zcard(client.keys.workers) == 1, timeout=10, message="a worker")
        for i in range(3):
            for n, pit in enumerate(pits):
                services.submit("default", "echo", [f"slow {n} {i}"], callback_url=pit.url)
        time.sleep(0.5)  # the tarpits' deliveries are made (and due) first
        for round_ in ("first", "again"):
            started = time.monotonic()
            services.submit("default", "echo", [round_], callback_url=f"{hook.url}/{round_}")
            wait_for(lambda: hook.to(f"/{round_}"), timeout=30, message=f"the fast webhook ({round_})")
            took = time.monotonic() - started
            assert took < 2.5, (round_, took)
            if round_ == "first":  # let the tarpits time out (5 s) and come back as slow targets
                wait_for(lambda: all(pit.accepted >= 2 for pit in pits), timeout=30, message="tarpits retried")
        assert [pit.most for pit in pits] == [1] * 8  # one delivery at a time per target
        slow = client.redis.zrange(client.keys.webhook_targets_slow, 0, -1)
        assert len(slow) >= 6, slow  # the tarpits (one may be being sent: then it sits at its claim)
    finally:
        stop.set()
