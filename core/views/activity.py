"""The Activity page: the audit log (core/audit.py), newest first, filtered
by who, through which door, what, queue, request and time; paged. Readable
by all staff; nothing here changes an entry (there is no POST)."""
from __future__ import annotations

import re
from datetime import timedelta, timezone as dt_timezone

from django import forms
from django.core.validators import RegexValidator
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from queueadmin.core.audit import SOURCES, AuditEntry
from queueadmin.core.queries import activity

from .common import RID, page, staff_required

PAGE_SIZE = 50
TIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"]
ACTION_NAME = re.compile(r"^[a-z][a-z_]{0,63}$")
SINCE = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7), "30d": timedelta(days=30)}


class ActivityFilterForm(forms.Form):
    who = forms.CharField(required=False, max_length=200, label="Who",
                          widget=forms.TextInput(attrs={"placeholder": "user, token or command", "type": "search"}))
    source = forms.ChoiceField(required=False, label="Through",
                               choices=[("", "anywhere")] + [(s, s) for s in SOURCES])
    action = forms.ChoiceField(required=False, label="What")
    queue = forms.CharField(required=False, max_length=64, label="Queue",
                            validators=[RegexValidator(r"^[A-Za-z0-9._-]+$", "letters, digits, '.', '_' or '-'")])
    request = forms.CharField(required=False, max_length=32, label="Request",
                              validators=[RegexValidator(RID, "a request id: letters, digits, '_' or '-'")])
    since = forms.ChoiceField(required=False, label="When", choices=[
        ("", "any time"), ("1h", "last hour"), ("24h", "last 24 hours"), ("7d", "last 7 days"),
        ("30d", "last 30 days")])
    at_from = forms.DateTimeField(required=False, label="From", input_formats=TIME_FORMATS,
                                  widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    at_to = forms.DateTimeField(required=False, label="To", input_formats=TIME_FORMATS,
                                widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        names = set(activity.actions())
        asked = self.data.get("action") if self.is_bound else None
        if isinstance(asked, str) and ACTION_NAME.match(asked):
            names.add(asked)  # a shared link to an action not recorded here yet: no entries, not an error
        self.fields["action"].choices = [("", "any action")] + [(a, a.replace("_", " ")) for a in sorted(names)]

    def filter(self, qs):
        """The valid filters applied to an AuditEntry queryset (invalid ones are shown, not applied)."""
        data = self.cleaned_data if self.is_bound and self.is_valid() else {}
        if data.get("who"):
            qs = qs.filter(who__icontains=data["who"].strip())
        for field, column in (("source", "source"), ("action", "action"), ("queue", "queue"),
                              ("request", "request_id")):
            if data.get(field):
                qs = qs.filter(**{column: data[field]})
        if data.get("since"):
            qs = qs.filter(at__gte=timezone.now() - SINCE[data["since"]])
        for name, op in (("at_from", "gte"), ("at_to", "lte")):
            value = data.get(name)
            if value:
                qs = qs.filter(**{f"at__{op}": _utc(value)})
        return qs


def _utc(value):
    """A time typed on the page is UTC (the page says so)."""
    return timezone.make_aware(value, dt_timezone.utc) if timezone.is_naive(value) else value


@never_cache
@require_GET
@staff_required
def activity_list(request):
    form = ActivityFilterForm(request.GET or None)
    pg, rows = activity.entries_page(form.filter(AuditEntry.objects.select_related("user")),
                                     request.GET.get("page"), PAGE_SIZE)
    params = request.GET.copy()
    params.pop("page", None)
    ctx = {"form": form, "rows": rows, "pg": pg, "filter_qs": params.urlencode(), "filter_errors": form.errors}
    return page(request, "queueadmin/activity.html", ctx, "activity")
