"""Chained requests (issue 12, part 3): a request names what follows it;
when it finishes, exactly one follow-up is submitted (each: one item per
successful result; all: one item with every result), even when the worker
that saw it finish dies at that moment."""
import threading

import pytest

from queueadmin.core.engine.features import chains
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.errors import QueueError
from tests.engine_helpers import burst, wait_for

pytestmark = pytest.mark.timeout(90)


def follow_up(qc, rid):
    return wait_for(lambda: qc.status(rid).get("then_id"), 20, message="the follow-up")


def test_each_submits_one_item_per_successful_result_in_index_order(qc):
    sub = qc.submit("default", "uppercase", ["a", "b", "c"], then={"processor": "word_count", "mode": "each"})
    burst(qc)
    fid = follow_up(qc, sub.id)
    assert fid == chains.follow_up_id(sub.id)
    st = qc.status(fid)
    assert st["parent"] == sub.id and st["processor"] == "word_count" and st["total"] == 3
    assert [r["payload"] for r in qc.items(fid)] == ["A", "B", "C"]
    assert st["state"] == "completed" and [r["result"] for r in qc.results(fid)] == [1, 1, 1]


def test_all_submits_one_item_with_every_result(qc):
    sub = qc.submit("default", "sha256", ["x", "y"], then={"processor": "echo", "mode": "all"})
    burst(qc)
    fid = follow_up(qc, sub.id)
    (item,) = qc.items(fid)
    assert item["payload"] == [r["result"] for r in qc.results(sub.id)]


def test_a_failed_request_has_no_follow_up_unless_asked(qc):
    qc.define_queue("once", QueueConfig(max_attempts=1))
    quiet = qc.submit("once", "fail", ["x"], then={"processor": "echo"})
    asked = qc.submit("once", "fail", ["y"], then={"processor": "echo", "mode": "all", "on_failure": True})
    burst(qc, ["once"])
    assert wait_for(lambda: qc.status(quiet.id).get("then_id"), 10) == "none"
    fid = follow_up(qc, asked.id)
    assert qc.items(fid)[0]["payload"] == [None]


def test_following_again_or_at_once_from_many_places_gives_one_follow_up(qc, r):
    sub = qc.submit("default", "echo", list(range(20)), then={"processor": "echo", "mode": "all"})
    burst(qc)
    follow_up(qc, sub.id)
    r.hdel(qc.keys.request(sub.id).meta, "then_id")  # as if the first follower died before noting it
    threads = [threading.Thread(target=chains.follow, args=(qc, sub.id)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert r.zcard(qc.keys.queue("default").index) <= 1  # only the follow-up may still be live
    followers = [k for k in r.scan_iter(f"qa:{{r:*}}:meta") if r.hget(k, "parent") == sub.id]
    assert len(followers) == 1


def test_a_bad_then_is_refused_before_anything_is_stored(r):
    from queueadmin.core.engine.client.queue_client import QueueClient

    client = QueueClient(r, prefix="qa", processors=["echo", "sha256"])
    for then in ({"processor": "nope"}, {"processor": "echo", "mode": "some"}, {"processor": "echo", "x": 1},
                 "echo", {"processor": "echo", "priority": 100}, {"processor": "echo", "time_limit": -1}):
        with pytest.raises(QueueError):
            client.submit("default", "echo", ["a"], then=then)
    assert r.zcard(client.keys.chains) == 0 and not list(r.scan_iter("qa:{r:*}:meta"))


@pytest.mark.slow
def test_workers_killed_as_the_request_finishes_still_give_exactly_one_follow_up(qc, workers):
    sub = qc.submit("default", "sleep", [0.01] * 60, concurrency=4, then={"processor": "echo", "mode": "all"})
    procs = [workers.start("default", 1, False, "", "--threads", "2") for _ in range(2)]
    wait_for(lambda: qc.status(sub.id)["state"] == "completed", 30, interval=0.001)
    for p in procs:
        workers.kill(p)  # at once: their reporters may not have followed yet
    workers.start("default", 1)
    fid = follow_up(qc, sub.id)
    wait_for(lambda: qc.status(fid)["state"] == "completed", 30)
    followers = [k for k in qc.redis.scan_iter("qa:{r:*}:meta") if qc.redis.hget(k, "parent") == sub.id]
    assert followers == [qc.keys.request(fid).meta]
    assert qc.redis.zcard(qc.keys.chains) == 0


# -- the entry points ---------------------------------------------------------

@pytest.mark.django_db
def test_the_api_takes_then_and_both_requests_link_to_each_other(redis_url):
    from tests.api.test_requests import make_user, run_burst
    from tests.api_helpers import Api
    from queueadmin.core.models import ApiToken

    api = Api(ApiToken.issue(make_user("chainer", act=True), "t")[1])
    resp = api.post("/api/v1/requests", {"queue": "default", "processor": "uppercase", "items": ["a", "b"],
                                         "then": {"processor": "echo", "mode": "all"}})
    assert resp.status_code == 201, resp.content
    rid = resp.json()["id"]
    assert resp.json()["then"] == {"processor": "echo", "queue": "default", "mode": "all", "on_failure": False}
    run_burst()
    fid = wait_for(lambda: api.get(f"/api/v1/requests/{rid}").json().get("then_id"), 20)
    follow = api.get(f"/api/v1/requests/{fid}").json()
    assert follow["parent"] == rid and follow["processor"] == "echo"
    for bad in ({"processor": "nope"}, {"processor": "echo", "mode": "sometimes"}, {"processor": "echo", "x": 1},
                "echo", {"processor": "echo", "priority": 500}):
        resp = api.post("/api/v1/requests", {"queue": "default", "processor": "echo", "items": ["a"], "then": bad})
        assert resp.status_code == 400 and "error" in resp.json(), (bad, resp.content)


@pytest.mark.django_db
def test_queue_submit_and_the_form_take_then_and_the_pages_link_both_ways(redis_url, tmp_path, admin_client):
    from django.core.management import call_command

    from queueadmin.core import services
    from tests.api.test_requests import run_burst

    path = tmp_path / "items.txt"
    path.write_text("a\nb\n")
    call_command("queue_submit", str(path), "--processor", "uppercase", "--then-processor", "echo",
                 "--then-mode", "all", verbosity=0)
    resp = admin_client.post("/submit/", {"queue": "default", "processor": "uppercase", "items": "c\nd",
                                          "then_processor": "word_count", "then_mode": "each"})
    assert resp.status_code in (200, 302), resp.content[:500]
    eng = services.engine()
    parents = [eng.redis.hget(k, "id") for k in eng.redis.scan_iter("qa:{r:*}:meta") if eng.redis.hget(k, "then")]
    assert len(parents) == 2
    run_burst()
    for rid in parents:
        fid = wait_for(lambda: eng.status(rid).get("then_id"), 20)
        assert admin_client.get(f"/requests/{fid}/").content.decode().count(f"/requests/{rid}/") >= 1
        assert f"/requests/{fid}/" in admin_client.get(f"/requests/{rid}/").content.decode()
