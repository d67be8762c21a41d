"""Forms of the dashboard. Validation messages are written for operators."""
from __future__ import annotations

import json
import re
from datetime import timedelta, timezone as dt_timezone

from django import forms
from django.db.models import Q
from django.utils import timezone

from queueadmin.core import conf
from queueadmin.core.engine.features import groups, ratelimit
from queueadmin.core.engine.config import MAX_CONCURRENCY
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.client.limits import MAX_DEDUP_KEY_CHARS, check_item, check_text
from queueadmin.core.webhooks import policy as webhooks

MAX_ITEMS = 100_000  # per request from the form (the engine takes more: limits.MAX_ITEMS_PER_REQUEST)
RANGE = re.compile(r"^(-?\d{1,18})\s*(?:-|\.\.|–)\s*(-?\d{1,18})$")  # "1-500", "1..500", "1 – 500"
DEFAULT_PROCESSORS = ("uppercase", "echo")  # the submit form's first choice: quick, and its result shows it ran
MAX_UPLOAD_BYTES = 20 * 1024 * 1024
STATES = ["scheduled", "queued", "running", "completed", "failed", "cancelled", "expired"]
# the admin's forms that save what Redis must be told (queues, periodic requests), when it is away
BACKEND_DOWN = "The queue backend (Redis) is unreachable, so workers cannot be told; nothing was saved. Try again."


def processor_choices():
    return [(name, name) for name in sorted(conf.processors())]


class SubmitForm(forms.Form):
    queue = forms.ChoiceField()
    processor = forms.ChoiceField()
    items = forms.CharField(widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false",
                                                         "placeholder": "one item per line"}),
                            required=False, strip=False, help_text="One item per line; blank lines are skipped.")
    upload = forms.FileField(required=False, label="…or a file", help_text="UTF-8 text, one item per line.")
    json_items = forms.BooleanField(required=False, label="Lines are JSON",
                                    help_text="Parse each line as a JSON value instead of a string.")
    item_range = forms.CharField(required=False, max_length=41, label="…or a range",
                                 widget=forms.TextInput(attrs={"placeholder": "e.g. 1-500", "inputmode": "numeric"}),
                                 help_text="One item per whole number from the first to the last (JSON numbers).")
    copies = forms.IntegerField(required=False, min_value=1, max_value=MAX_ITEMS, initial=1, label="Copies",
                                widget=forms.NumberInput(attrs={"placeholder": "1"}),
                                help_text="Submit the items this many times over (N copies in one request).")
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
    time_limit_seconds = forms.FloatField(required=False, min_value=0, max_value=10 * 365 * 86400,
                                          label="Time limit (seconds)",
                                          widget=forms.NumberInput(attrs={"placeholder": "queue default",
                                                                          "step": "any"}),
                                          help_text="An item running longer is stopped (a failed attempt). "
                                                    "0: no limit. Empty: the queue's.")
    rate_limit = forms.CharField(required=False, max_length=32, label="Rate limit",
                                 widget=forms.TextInput(attrs={"placeholder": "none, e.g. 20/s"}),
                                 help_text="At most this many of its items start in any window, across all "
                                           "workers: 20/s, 600/min, 10000/h.")
    group = forms.CharField(required=False, max_length=64, label="Group",
                            widget=forms.TextInput(attrs={"placeholder": "none, e.g. customer-42"}),
                            help_text="A group (tenant): its items count against the group's limits and take "
                                      "fair turns with other groups.")
    dedup_key = forms.CharField(required=False, max_length=MAX_DEDUP_KEY_CHARS, label="De-dup key",
                                help_text="Empty: a hash of processor and items.")
    callback_url = forms.CharField(required=False, max_length=2000, label="Callback URL (webhook)",
                                   widget=forms.URLInput(attrs={"placeholder": "https://example.com/hook"}),
                                   help_text="Sent the request's summary, signed with the site's webhook "
                                             "secret, when it finishes.")

    then_processor = forms.ChoiceField(required=False, label="Then (follow-up processor)",
                                       help_text="When this request finishes, submit one that follows it.")
    then_mode = forms.ChoiceField(required=False, label="Follow-up items", initial="each",
                                  choices=[("each", "each: one per successful result"),
                                           ("all", "all: one item with every result")])

    def __init__(self, *args, queues: list[str], default_queue: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["queue"].choices = [(q, q) for q in queues]
        self.fields["processor"].choices = processor_choices()
        names = [name for name, _ in self.fields["processor"].choices]
        self.fields["processor"].initial = next((p for p in DEFAULT_PROCESSORS if p in names), None)
        self.fields["then_processor"].choices = [("", "— none —"), *processor_choices()]
        # items may hold any text, NUL included (as a file or the API); the
        # limits are checked per line in clean()
        self.fields["items"].validators = []
        if default_queue:
            self.fields["queue"].initial = default_queue

    def clean_callback_url(self):
        url = self.cleaned_data.get("callback_url") or ""
        problem = webhooks.refusal(url) if url else None
        if problem:
            raise forms.ValidationError(problem)
        return url or None

    def clean_rate_limit(self):
        try:
            return ratelimit.canonical(self.cleaned_data.get("rate_limit"))
        except ratelimit.RateLimitError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_group(self):
        try:
            return groups.check_group(self.cleaned_data.get("group")) or None
        except QueueError as exc:
            raise forms.ValidationError(str(exc)) from None

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
        field = "upload" if upload else "items"
        if data.get("item_range"):
            data["item_list"] = self.range_items(data["item_range"], bool(text.strip()))
        else:
            data["item_list"] = self.item_list(text, bool(data.get("json_items")), field)
        data["item_list"] = self.times(data["item_list"], data.get("copies") or 1)
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
        if data.get("dedup_key"):
            try:
                check_text(data["dedup_key"], "the de-dup key")
            except QueueError as exc:
                self.add_error("dedup_key", str(exc))
        return data

    def range_items(self, text: str, lines_given: bool) -> list:
        """`first-last` (whole numbers, first <= last): one item per number."""
        if lines_given:
            self.add_error("item_range", "give lines, a file or a range, not several")
            return []
        m = RANGE.match(text.strip())
        if not m:
            self.add_error("item_range", "write a range as first-last, e.g. 1-500 (whole numbers)")
            return []
        first, last = int(m[1]), int(m[2])
        if last < first:
            self.add_error("item_range", "the range's last number is smaller than its first")
            return []
        if last - first + 1 > MAX_ITEMS:
            self.add_error("item_range", f"at most {MAX_ITEMS:,} items per request ({last - first + 1:,} in range)")
            return []
        return list(range(first, last + 1))

    def times(self, items: list, copies: int) -> list:
        """The items `copies` times over, within the request's item limit."""
        if copies > 1 and len(items) * copies > MAX_ITEMS:
            self.add_error("copies", f"at most {MAX_ITEMS:,} items per request ({len(items) * copies:,} with "
                                     f"{copies:,} copies)")
            return []
        return items * copies

    def item_list(self, text: str, as_json: bool, field: str) -> list:
        """One item per non-blank line (numbered as in the text), each checked
        as the engine will; errors go to `field` and name the line."""
        numbered = [(n, line.rstrip("\r")) for n, line in enumerate(text.split("\n"), 1)]
        numbered = [(n, line) for n, line in numbered if line.strip()]
        if not numbered and not self.errors:
            self.add_error("items", "give at least one item (a line of text), or upload a file")
        if len(numbered) > MAX_ITEMS:
            self.add_error(field, f"at most {MAX_ITEMS:,} items per request ({len(numbered):,} given)")
            return []
        items = []
        for n, line in numbered:
            try:
                item = json.loads(line) if as_json else line
                check_item(item, f"line {n}")
            except (ValueError, RecursionError) as exc:  # QueueError is a ValueError
                self.add_error(field, str(exc) if isinstance(exc, QueueError) else f"line {n} is not valid JSON")
                return []
            items.append(item)
        return items


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
