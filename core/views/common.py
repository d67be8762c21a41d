"""What every dashboard view shares: the auth decorators, htmx-aware
rendering (the whole page, or only its fragment for htmx), the bulk-action
confirmation step and small input parsers that turn bad input into messages."""
from __future__ import annotations

import functools
import re

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.conf import settings
from django.http import Http404
from django.shortcuts import resolve_url, render
from django.urls import NoReverseMatch, Resolver404, resolve, reverse
from django_htmx.http import reswap, retarget

from queueadmin.core.auth import can_act

RID = re.compile(r"^[0-9A-Za-z_-]{1,32}$")
ENTRY = re.compile(r"^\d{1,20}-\d{1,20}$")

NAV = [
    ("overview", "Overview"),
    ("submit", "Submit"),
    ("requests", "Requests"),
    ("inflight", "In flight"),
    ("dead", "Dead letters"),
    ("scheduled", "Scheduled"),
    ("workers", "Workers"),
    ("queues", "Queues"),
    ("activity", "Activity"),
]


def staff_required(view):
    """Anonymous users go to the login page; signed-in non-staff get 403."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        user = request.user
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path(), login_url())
        if not (user.is_active and user.is_staff):
            raise PermissionDenied("staff only")
        return view(request, *args, **kwargs)

    return wrapper


def login_url() -> str:
    """The project's LOGIN_URL when it leads somewhere, else the admin's login
    (a project made by startproject has the admin but no /accounts/login/)."""
    try:
        url = resolve_url(settings.LOGIN_URL)
        if "://" not in url:  # another site's login (single sign-on) is taken as it is
            resolve(url.split("?")[0])
        return url
    except (NoReverseMatch, Resolver404):
        pass
    try:
        return reverse("admin:login")
    except NoReverseMatch:
        return resolve_url(settings.LOGIN_URL)


def logout_url() -> str | None:
    """The project's logout view, else the admin's; None: no button."""
    for name in ("logout", "admin:logout"):
        try:
            return reverse(name)
        except NoReverseMatch:
            pass
    return None


def act_required(view):
    """Staff who may only view get 403 on anything that changes state."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if not can_act(request.user):
            raise PermissionDenied("you may view the dashboard but not change anything")
        return view(request, *args, **kwargs)

    return staff_required(wrapper)


def page(request, template: str, context: dict, section: str, status: int = 200):
    """Render `template`; an htmx request (not boosted) gets only its fragment,
    the template's `_body` partial, which the full page includes too."""
    ctx = {"section": section, "nav": NAV, "can_act": can_act(request.user), "logout_url": logout_url(), **context}
    if getattr(request, "htmx", False) and not request.htmx.boosted:
        return render(request, template.replace(".html", "_body.html"), ctx, status=status)
    return render(request, template, ctx, status=status)


def confirm(request, *, title: str, text: str, count: int | None, action_url: str, fields: list[tuple[str, str]],
            back_url: str, danger: bool = False, section: str = ""):
    """The confirmation step of an action: states how many items it will
    touch (count None: one thing, named in `text`, and no number shown) and
    re-posts the same fields with confirm=1."""
    ctx = {"title": title, "text": text, "count": count, "action_url": action_url, "fields": fields,
           "back_url": back_url, "danger": danger}
    if getattr(request, "htmx", False):
        response = render(request, "queueadmin/confirm_dialog.html", {**ctx, "can_act": True})
        return reswap(retarget(response, "#dialog-slot"), "innerHTML")
    return page(request, "queueadmin/confirm.html", ctx, section)


def check_rid(rid: str) -> str:
    if not RID.match(rid or ""):
        raise Http404("no such request")
    return rid


def parse_int(request, value, name: str, lo: int, hi: int) -> int | None:
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        messages.error(request, f"{name} must be a whole number between {lo} and {hi}.")
        return None
    if not lo <= n <= hi:
        messages.error(request, f"{name} must be between {lo} and {hi}.")
        return None
    return n


def selected_pairs(values) -> list[tuple[str, str]]:
    """Checkbox values "request:entry" -> valid (rid, entry) pairs only."""
    out = []
    for v in values:
        rid, _, eid = str(v).partition(":")
        if RID.match(rid) and ENTRY.match(eid):
            out.append((rid, eid))
    return out
