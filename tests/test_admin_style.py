"""The admin as part of the product (issue 22): the standalone's admin wears
the dashboard's header, logo, colours and fonts, light and dark
(queueadmin/templates/admin/base_site.html, static/queueadmin/admin.css,
whose palette must agree with the dashboard's app.css), links back to the
dashboard, is linked from it for staff, and its token form starts with a
scope ticked, so its first save works."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from queueadmin.core.models import ApiToken

pytestmark = pytest.mark.django_db

STATIC = Path(__file__).resolve().parents[1] / "static" / "queueadmin"


def palette(css: str, block: str) -> dict[str, str]:
    """--name: #hex of one :root block of app.css ("light": the first, "dark": the one in the media query)."""
    start = css.index(":root {") if block == "light" else css.index(":root {", css.index("prefers-color-scheme: dark"))
    body = css[start:css.index("}", start)]
    return dict(re.findall(r"(--[\w-]+):\s*(#[0-9a-fA-F]{6})", body))


def test_the_admins_colours_are_the_dashboards_light_and_dark():
    app, admin = (STATIC / "app.css").read_text(), (STATIC / "admin.css").read_text()
    blocks = {"light": admin[:admin.index('html[data-theme="dark"]')],
              "dark": admin[admin.index('html[data-theme="dark"]'):admin.index("@media")]}
    for theme, text in blocks.items():
        dashboard = palette(app, theme)
        mirrored = re.findall(r"--[\w-]+:\s*(#[0-9a-fA-F]{6});\s*/\*\s*(--[\w-]+)", text)
        assert len(mirrored) >= 15, theme
        for value, name in mirrored:
            assert dashboard[name].lower() == value.lower(), (theme, name, value)
    assert "system-ui" in admin and "ui-monospace" in admin  # the dashboard's fonts


def test_admin_pages_wear_the_dashboards_header_and_link_back(admin_client, engine):
    page = admin_client.get(reverse("admin:index")).content.decode()
    assert "queueadmin/admin.css" in page and 'class="qa-brand"' in page
    assert f'href="{reverse("queueadmin:overview")}">Dashboard</a>' in page
    token_page = admin_client.get(reverse("admin:queueadmin_apitoken_changelist")).content.decode()
    assert "queueadmin/admin.css" in token_page
    dashboard = admin_client.get(reverse("queueadmin:overview")).content.decode()
    assert f'href="{reverse("admin:index")}"' in dashboard


def test_the_admin_login_is_styled_too(client, db):
    page = client.get(reverse("admin:login")).content.decode()
    assert "queueadmin/admin.css" in page and 'class="qa-brand"' in page


def test_the_token_form_starts_with_read_and_its_first_save_works(admin_client, engine):
    user = User.objects.create_user("producer", password="pw", is_staff=True)
    form = admin_client.get(reverse("admin:queueadmin_apitoken_add")).content.decode()
    ticked = re.findall(r'<input type="checkbox" name="scopes" value="(\w+)"[^>]*checked', form)
    assert ticked == ["read"]
    resp = admin_client.post(reverse("admin:queueadmin_apitoken_add"), {"user": user.pk, "name": "ci",
                                                                         "scopes": ticked})
    assert resp.status_code in (200, 302) and "errorlist" not in resp.content.decode()
    assert ApiToken.objects.get(user=user).scopes == "read"
