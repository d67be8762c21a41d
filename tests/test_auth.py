"""API tokens: scopes, expiry, revocation, and who may issue what (admin and
`manage.py queue_token`). Each test fails on the tokens of before issue 10
(no scopes, no expiry, anyone with "add API token" could issue for anyone)."""
from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import JsonResponse
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from queueadmin.core import auth, services
from queueadmin.core.models import ApiToken, RequestRecord

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]


def make_user(username, *, staff=True, act=False, superuser=False, perms=()):
    user = User.objects.create_user(username, password="pw", is_staff=staff, is_superuser=superuser)
    for codename in perms + (("change_requestrecord",) if act else ()):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return User.objects.get(pk=user.pk)  # permissions are cached per instance


def bearer(key, path="/", method="get", **kw):
    return getattr(RequestFactory(), method)(path, headers={"Authorization": f"Bearer {key}"}, **kw)


def ok_view(request):
    return JsonResponse({"user": request.user.username})


# -- the interface: authenticate, allows, token_required(scope=) ------------------------


def test_allows_needs_the_scope_and_the_users_permission():
    operator = make_user("operator", act=True)
    read_only, _ = ApiToken.issue(operator, scopes=["read"])
    assert read_only.allows("read") and not read_only.allows("submit") and not read_only.allows("steer")
    full, _ = ApiToken.issue(operator, scopes=auth.SCOPES)
    assert all(full.allows(s) for s in auth.SCOPES)
    # Taking the permission away narrows the token at once.
    operator.user_permissions.clear()
    full = ApiToken.objects.select_related("user").get(pk=full.pk)
    assert full.allows("read") and not full.allows("submit") and not full.allows("steer")
    operator.is_staff = False
    operator.save()
    full = ApiToken.objects.select_related("user").get(pk=full.pk)
    assert not full.allows("read") and full.allows("metrics")


def test_a_non_staff_users_token_reads_nothing():
    token, _ = ApiToken.issue(make_user("outsider", staff=False))  # read submit steer, as migrated tokens
    assert not any(token.allows(s) for s in ("read", "submit", "steer", "metrics"))


@pytest.mark.parametrize("scope", ["read", "submit", "steer"])
def test_token_required_enforces_the_scope(scope):
    operator = make_user("operator", act=True)
    view = auth.token_required(ok_view, scope=scope)
    _, with_scope = ApiToken.issue(operator, scopes=[scope])
    others = [s for s in auth.SCOPES if s != scope]
    _, without = ApiToken.issue(operator, scopes=others)
    assert view(bearer(with_scope)).status_code == 200
    refused = view(bearer(without))
    assert refused.status_code == 403 and scope in refused.content.decode()
    assert view(bearer("qa_unknown")).status_code == 401


def test_a_read_only_token_cannot_submit_through_the_api(redis_url):
    services.sync_queues()
    _, key = ApiToken.issue(make_user("operator", act=True), scopes=["read"])
    body = {"queue": "default", "processor": "echo", "items": ["a"]}
    client = Client(headers={"Authorization": f"Bearer {key}"})
    response = client.post("/api/requests", body, content_type="application/json")
    assert response.status_code == 403
    assert client.get("/api/queues").status_code == 200
    assert not RequestRecord.objects.exists()


def test_a_non_staff_token_cannot_read_through_the_api(redis_url):
    services.sync_queues()
    _, key = ApiToken.issue(make_user("outsider", staff=False))
    assert Client().get("/api/queues", headers={"Authorization": f"Bearer {key}"}).status_code == 403


def test_expired_tokens_are_refused():
    user = make_user("viewer")
    token, key = ApiToken.issue(user, scopes=["read"], expires_at=timezone.now() + timedelta(hours=1))
    assert auth.authenticate(bearer(key)) == token
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert auth.authenticate(bearer(key)) is None
    assert auth.token_required(ok_view, scope="read")(bearer(key)).status_code == 401


def test_revoked_and_deleted_tokens_are_refused_at_once():
    user = make_user("viewer")
    token, key = ApiToken.issue(user, scopes=["read"])
    assert auth.authenticate(bearer(key)) == token
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    assert auth.authenticate(bearer(key)) is None
    token, key = ApiToken.issue(user, scopes=["read"])
    token.delete()
    assert auth.authenticate(bearer(key)) is None


def test_metrics_allowed_takes_the_env_key_or_a_metrics_token(settings):
    settings.QUEUEADMIN_METRICS_TOKEN = "scrape-me-0123456789"
    scraper = make_user("prometheus", staff=False)
    _, metrics_key = ApiToken.issue(scraper, scopes=["metrics"])
    _, other_key = ApiToken.issue(make_user("operator", act=True), scopes=["read", "submit", "steer"])
    assert auth.metrics_allowed(bearer("scrape-me-0123456789"))
    assert auth.metrics_allowed(bearer(metrics_key))
    assert not auth.metrics_allowed(bearer(other_key))
    assert not auth.metrics_allowed(bearer("scrape-me-wrong"))
    assert not auth.metrics_allowed(RequestFactory().get("/"))
    settings.QUEUEADMIN_METRICS_TOKEN = ""
    assert not auth.metrics_allowed(bearer(""))


# -- migration: today's tokens keep working ---------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_existing_tokens_are_migrated_to_read_submit_steer():
    executor = MigrationExecutor(connection)
    executor.migrate([("queueadmin", "0003_queue_time_limit")])
    old = executor.loader.project_state([("queueadmin", "0003_queue_time_limit")]).apps
    user = old.get_model("auth", "User").objects.create(username="producer", is_staff=True)
    old.get_model("queueadmin", "ApiToken").objects.create(user=user, key_hash=ApiToken.hash("qa_old"), prefix="qa_old")
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    token = ApiToken.objects.get(prefix="qa_old")
    assert token.scopes_list == ["read", "submit", "steer"] and token.expires_at is None
    assert auth.authenticate(bearer("qa_old")) == token


# -- issuing in the admin -----------------------------------------------------------------


def admin_as(user):
    client = Client()
    client.force_login(user)
    return client


def add_token(client, **data):
    return client.post(reverse("admin:queueadmin_apitoken_add"), data, follow=True)


def test_staff_with_add_permission_cannot_issue_for_a_superuser():
    root = make_user("root", superuser=True)
    staff = make_user("staff", perms=("add_apitoken", "view_apitoken"))
    client = admin_as(staff)
    page = client.get(reverse("admin:queueadmin_apitoken_add")).content.decode()
    assert ">root<" not in page and ">staff<" in page
    response = add_token(client, user=root.pk, name="mine now", scopes=["read", "submit", "steer"])
    assert ApiToken.objects.count() == 0
    assert "qa_" not in response.content.decode()


def test_staff_cannot_pick_scopes_beyond_their_own():
    staff = make_user("staff", perms=("add_apitoken", "view_apitoken"))
    client = admin_as(staff)
    for scopes in (["submit"], ["steer"], ["read", "submit"]):
        response = add_token(client, user=staff.pk, scopes=scopes)
        assert "lacks the permission" in response.content.decode(), scopes
    assert ApiToken.objects.count() == 0
    response = add_token(client, user=staff.pk, name="mine", scopes=["read", "metrics"])
    key = re.search(r"is (qa_[A-Za-z0-9_-]+) ", response.content.decode())[1]
    token = auth.authenticate(bearer(key))
    assert token.user == staff and token.scopes_list == ["read", "metrics"]


def test_a_user_without_staff_rights_cannot_get_read_from_a_superuser_either():
    root = make_user("root", superuser=True)
    outsider = make_user("outsider", staff=False)
    response = add_token(admin_as(root), user=outsider.pk, scopes=["read"])
    assert "lacks the permission" in response.content.decode() and ApiToken.objects.count() == 0
    response = add_token(admin_as(root), user=outsider.pk, scopes=["metrics"])  # a scraper account
    assert ApiToken.objects.get().scopes_list == ["metrics"]


def test_admin_sets_an_expiry_and_refuses_one_in_the_past():
    root = make_user("root", superuser=True)
    client = admin_as(root)
    past = timezone.now() - timedelta(days=1)
    response = add_token(client, user=root.pk, scopes=["read"], expires_at_0=past.strftime("%Y-%m-%d"),
                         expires_at_1=past.strftime("%H:%M:%S"))
    assert "must lie in the future" in response.content.decode() and ApiToken.objects.count() == 0
    future = timezone.now() + timedelta(days=30)
    add_token(client, user=root.pk, scopes=["read"], expires_at_0=future.strftime("%Y-%m-%d"),
              expires_at_1=future.strftime("%H:%M:%S"))
    assert ApiToken.objects.get().expires_at.date() == future.date()


def test_non_superusers_see_and_revoke_only_their_own_tokens():
    root = make_user("root", superuser=True)
    staff = make_user("staff", perms=("view_apitoken", "change_apitoken", "delete_apitoken"))
    roots, root_key = ApiToken.issue(root, "root's")
    mine, my_key = ApiToken.issue(staff, "staff's", scopes=["read"])
    client = admin_as(staff)
    listing = client.get(reverse("admin:queueadmin_apitoken_changelist")).content.decode()
    assert "staff&#x27;s" in listing and "root&#x27;s" not in listing
    assert client.get(reverse("admin:queueadmin_apitoken_change", args=[roots.pk])).status_code in (302, 403, 404)
    assert client.post(reverse("admin:queueadmin_apitoken_delete", args=[roots.pk]), {"post": "yes"}).status_code != 200
    assert ApiToken.objects.filter(pk=roots.pk).exists()
    # The revoke action: refused at once.
    client.post(reverse("admin:queueadmin_apitoken_changelist"),
                {"action": "revoke", "_selected_action": [mine.pk, roots.pk]})
    assert auth.authenticate(bearer(my_key)) is None
    assert auth.authenticate(bearer(root_key)) == roots


# -- issuing with manage.py queue_token ------------------------------------------------------


def run_token(*args):
    out, err = StringIO(), StringIO()
    call_command("queue_token", *args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue()


def test_command_refuses_scopes_beyond_the_users_permissions():
    make_user("viewer")
    make_user("outsider", staff=False)
    for user, scopes in (("viewer", "submit"), ("viewer", "read,steer"), ("outsider", "read")):
        with pytest.raises(CommandError, match="lacks the permission"):
            run_token(user, "--scopes", scopes)
    with pytest.raises(CommandError, match="may neither read nor act"):
        run_token("outsider")
    with pytest.raises(CommandError, match="unknown scope 'admin'"):
        run_token("viewer", "--scopes", "read,admin")
    assert ApiToken.objects.count() == 0


def test_command_defaults_to_the_users_own_scopes_and_sets_an_expiry():
    make_user("viewer")
    make_user("operator", act=True)
    make_user("prometheus", staff=False)
    key, err = run_token("viewer")
    assert auth.authenticate(bearer(key)).scopes_list == ["read"] and "scopes: read" in err
    key, _ = run_token("operator", "--expires-in", "90d")
    token = auth.authenticate(bearer(key))
    assert token.scopes_list == ["read", "submit", "steer"]
    assert abs(token.expires_at - (timezone.now() + timedelta(days=90))) < timedelta(minutes=1)
    key, _ = run_token("prometheus", "--scopes", "metrics")
    assert auth.authenticate(bearer(key)).allows("metrics")


@pytest.mark.parametrize("value", ["0", "-5d", "soon", "3y", "99999999w"])
def test_command_refuses_a_bad_lifetime(value):
    make_user("viewer")
    with pytest.raises(CommandError, match="--expires-in"):
        run_token("viewer", "--expires-in", value)
    assert ApiToken.objects.count() == 0
