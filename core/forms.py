"""Forms of the dashboard. Validation messages are written for operators."""
from __future__ import annotations

import json
from datetime import timedelta, timezone as dt_timezone

from django import forms
from django.conf import settings
from django.utils import timezone

from core.engine.config import MAX_CONCURRENCY

MAX_ITEMS = 100_000
MAX_UPLOAD_BYTES = 20 * 1024 * 1024
STATES = ["scheduled", "queued", "running", "completed", "failed", "cancelled", "expired"]


def processor_choices():
    return [(name, name) for name in sorted(settings.QUEUEADMIN["PROCESSORS"])]


class SubmitForm(forms.Form):
    queue = forms.ChoiceField()
    processor = forms.ChoiceField()
    items = forms.CharField(widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false",
                                                         "placeholder": "one item per line"}),
                            required=False, strip=False, help_text="One item per line; blank lines are skipped.")
    upload = forms.FileField(required=False, label="…or a file", help_text="UTF-8 text, one item per line.")
    json_items = forms.BooleanField(required=False, label="Lines are JSON",
                                    help_text="Parse each line as a JSON value instead of a string.")
    priority = forms.IntegerField(required=False, min_value=0, max_value=99,
                                  widget=forms.NumberInput(attrs={"placeholder": "queue default"}),
                                  help_text="0–99, higher first. Empty: the queue's default.")
    concurrency = forms.IntegerField(required=False, min_value=1, max_value=MAX_CONCURRENCY,
                                     widget=forms.NumberInput(attrs={"placeholder": "queue default"}),
                                     help_text="Items of this request in flight at once. Empty: queue default.")
    delay_seconds = forms.FloatField(required=False, min_value=0, max_value=10 * 365 * 86400,
                                     label="Delay (seconds)", widget=forms.NumberInput(attrs={"placeholder": "0",
                                                                                              "step": "any"}))
    start_at = forms.DateTimeField(required=False, label="…or start at (UTC)",
                                   widget=forms.DateTimeInput(attrs={"type": "datetime-local"},
                                                              format="%Y-%m-%dT%H:%M"),
                                   input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"])
    expires_in_seconds = forms.FloatField(required=False, min_value=1, max_value=10 * 365 * 86400,
                                          label="Expires after (seconds)",
                                          help_text="Items not started by then are marked expired.")
    dedup_key = forms.CharField(required=False, max_length=200, label="De-dup key",
                                help_text="Empty: a hash of processor and items.")

    def __init__(self, *args, queues: list[str], default_queue: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["queue"].choices = [(q, q) for q in queues]
        self.fields["processor"].choices = processor_choices()
        if default_queue:
            self.fields["queue"].initial = default_queue

    def clean_upload(self):
        f = self.cleaned_data.get("upload")
        if f and f.size > MAX_UPLOAD_BYTES:
            raise forms.ValidationError(f"the file is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB")
        return f

    def clean(self):
        data = super().clean()
        text = data.get("items") or ""
        upload = data.get("upload")
        if upload:
            try:
                text = upload.read().decode("utf-8-sig")
            except UnicodeDecodeError:
                self.add_error("upload", "the file is not UTF-8 text")
                return data
        lines = [line.rstrip("\r") for line in text.split("\n")]
        lines = [line for line in lines if line.strip()]
        if not lines and not self.errors:
            self.add_error("items", "give at least one item (a line of text), or upload a file")
        if len(lines) > MAX_ITEMS:
            self.add_error("items", f"at most {MAX_ITEMS:,} items per request ({len(lines):,} given)")
        items = lines
        if data.get("json_items") and lines:
            items = []
            for n, line in enumerate(lines, 1):
                try:
                    items.append(json.loads(line))
                except ValueError:
                    self.add_error("items", f"line {n} is not valid JSON")
                    break
        data["item_list"] = items
        start_at, delay = data.get("start_at"), data.get("delay_seconds")
        if start_at and delay:
            self.add_error("start_at", "give either a delay or a start time, not both")
        elif start_at:
            if timezone.is_naive(start_at):
                start_at = timezone.make_aware(start_at, dt_timezone.utc)
            seconds = (start_at - timezone.now()).total_seconds()
            if seconds > 10 * 365 * 86400:
                self.add_error("start_at", "the start time is too far away")
            data["delay"] = max(0.0, seconds)
        else:
            data["delay"] = delay or 0.0
        return data


class RequestFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Search",
                        widget=forms.TextInput(attrs={"placeholder": "id, de-dup key or item text",
                                                      "type": "search"}))
    queue = forms.ChoiceField(required=False)
    state = forms.ChoiceField(required=False, choices=[("", "any state"), ("live", "live (not finished)")]
                              + [(s, s) for s in STATES])
    processor = forms.ChoiceField(required=False)
    priority_min = forms.IntegerField(required=False, min_value=0, max_value=99, label="Priority ≥")
    priority_max = forms.IntegerField(required=False, min_value=0, max_value=99, label="Priority ≤")
    since = forms.ChoiceField(required=False, label="Created", choices=[
        ("", "any time"), ("15m", "last 15 minutes"), ("1h", "last hour"), ("24h", "last 24 hours"),
        ("7d", "last 7 days"), ("30d", "last 30 days")])
    created_from = forms.DateTimeField(required=False, label="From",
                                       widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
                                       input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"])
    created_to = forms.DateTimeField(required=False, label="To",
                                     widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
                                     input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"])

    SINCE = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "24h": timedelta(days=1),
             "7d": timedelta(days=7), "30d": timedelta(days=30)}

    def __init__(self, *args, queues: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["queue"].choices = [("", "any queue")] + [(q, q) for q in queues]
        self.fields["processor"].choices = [("", "any processor")] + processor_choices()

    def filter(self, qs):
        """Apply the valid filters to a RequestRecord queryset."""
        from django.db.models import Q

        data = self.cleaned_data if self.is_bound and self.is_valid() else {}
        if data.get("queue"):
            qs = qs.filter(queue=data["queue"])
        state = data.get("state")
        if state == "live":
            qs = qs.filter(state__in=["scheduled", "queued", "running"])
        elif state:
            qs = qs.filter(state=state)
        if data.get("processor"):
            qs = qs.filter(processor=data["processor"])
        if data.get("priority_min") is not None:
            qs = qs.filter(priority__gte=data["priority_min"])
        if data.get("priority_max") is not None:
            qs = qs.filter(priority__lte=data["priority_max"])
        if data.get("since"):
            qs = qs.filter(created_at__gte=timezone.now() - self.SINCE[data["since"]])
        for name, op in (("created_from", "gte"), ("created_to", "lte")):
            value = data.get(name)
            if value:
                if timezone.is_naive(value):
                    value = timezone.make_aware(value, dt_timezone.utc)
                qs = qs.filter(**{f"created_at__{op}": value})
        q = (data.get("q") or "").strip()
        if q:
            qs = qs.filter(Q(id__startswith=q) | Q(dedup_key__startswith=q) | Q(items_preview__icontains=q))
        return qs
