"""Queues in the admin: their configuration, with live columns from Redis;
pause and resume. Queues cannot be deleted here (a worker serving a
vanished queue would fail): pause them instead."""
from __future__ import annotations

import contextvars
from dataclasses import fields

import redis
from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError

from queueadmin.core import clients, operations
from queueadmin.core.admin.audited import AuditedAdmin
from queueadmin.core.audit import Actor
from queueadmin.core.engine.client.queue_client import QueueError
from queueadmin.core.engine.config import QueueConfig
from queueadmin.core.engine.features import encryption, ratelimit
from queueadmin.core.forms import BACKEND_DOWN
from queueadmin.core.models import Queue, QueueGroup

_live_cache: contextvars.ContextVar[dict | None] = contextvars.ContextVar("queue_live", default=None)


class QueueForm(forms.ModelForm):
    class Meta:
        model = Queue
        fields = "__all__"

    def clean_rate_limit(self):
        try:
            return ratelimit.canonical(self.cleaned_data.get("rate_limit"))  # stored as `20/s`, whatever was typed
        except ratelimit.RateLimitError as exc:
            raise ValidationError(str(exc)) from None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "group_concurrency" in self.fields:  # a form posted before groups existed keeps the current value
            self.fields["group_concurrency"].required = False

    def clean_group_concurrency(self):
        value = self.cleaned_data.get("group_concurrency")
        return (self.instance.group_concurrency or 0) if value is None else value

    def clean_group_rate_limit(self):
        try:
            return ratelimit.canonical(self.cleaned_data.get("group_rate_limit"))
        except ratelimit.RateLimitError as exc:
            raise ValidationError(str(exc)) from None

    def clean(self):
        data = super().clean()
        if self.errors:
            return data  # show the field errors first
        values = {f.name: data.get(f.name, getattr(self.instance, f.name)) for f in fields(QueueConfig)}
        try:
            QueueConfig(**values).validate()
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
        if values["backoff_max_seconds"] < values["backoff_seconds"]:
            self.add_error("backoff_max_seconds", "The longest retry delay cannot be shorter than the first one.")
        if values.get("encrypt"):
            problem = encryption.problem()
            if problem:
                self.add_error("encrypt", problem)
        try:
            clients.redis_client().ping()
        except redis.RedisError:
            raise ValidationError(BACKEND_DOWN) from None
        return data


class QueueGroupForm(forms.ModelForm):
    class Meta:
        model = QueueGroup
        fields = ("name", "concurrency", "rate_limit")

    def clean_rate_limit(self):
        try:
            return ratelimit.canonical(self.cleaned_data.get("rate_limit"))
        except ratelimit.RateLimitError as exc:
            raise ValidationError(str(exc)) from None


class QueueGroupInline(admin.TabularInline):
    """A group's own limits (features/groups.py); saving or deleting one
    tells Redis at once (signals.py)."""

    model = QueueGroup
    form = QueueGroupForm
    extra = 0
    verbose_name = "group limit"
    verbose_name_plural = "Group limits (groups not listed use the queue's group defaults)"


@admin.register(Queue)
class QueueAdmin(AuditedAdmin):
    form = QueueForm
    inlines = (QueueGroupInline,)
    list_display = ("name", "paused", "priority", "concurrency", "lease_seconds", "time_limit_seconds",
                    "rate_limit", "max_attempts", "retention_seconds", "waiting", "in_flight", "workers_see")
    list_filter = ("paused",)
    search_fields = ("name",)
    actions = ("pause_queues", "resume_queues")
    fieldsets = (
        (None, {"fields": ("name", "paused")}),
        ("Request defaults", {"fields": ("priority", "concurrency")}),
        ("Throughput", {"fields": ("rate_limit",)}),
        ("Groups (tenants)", {"fields": ("group_concurrency", "group_rate_limit")}),
        ("Delivery and retries", {"fields": ("lease_seconds", "time_limit_seconds", "max_attempts",
                                             "backoff_seconds", "backoff_max_seconds", "unrunnable_seconds")}),
        ("Retention", {"fields": ("retention_seconds",)}),
        ("Encryption", {"fields": ("encrypt",)}),
    )

    def audit_queue(self, obj) -> str:
        return obj.name

    def get_readonly_fields(self, request, obj=None):
        return ("name",) if obj is not None else ()  # a renamed queue would strand its work

    def get_inline_instances(self, request, obj=None):
        # a form posted without the group rows (a script that knew the form before groups) leaves them alone
        if request.method == "POST" and "groups-TOTAL_FORMS" not in request.POST:
            return []
        return super().get_inline_instances(request, obj)

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        try:
            super().save_model(request, obj, form, change)
        except redis.RedisError:  # Redis went away between the form check and the save
            messages.warning(request, f"Queue {obj.name} was saved, but Redis could not be told; workers keep "
                                      "the old settings until it is saved again or a worker restarts.")

    # Live columns: Redis is read once per queue while the list renders.
    def changelist_view(self, request, extra_context=None):
        reset = _live_cache.set({})
        try:
            response = super().changelist_view(request, extra_context)
            if hasattr(response, "render"):
                response.render()
            return response
        finally:
            _live_cache.reset(reset)

    def _live(self, obj) -> dict | None:
        cache = _live_cache.get()
        if cache is None:
            cache = {}
        if obj.name not in cache:
            try:
                client = clients.engine()
                cache[obj.name] = {**client.queue_stats(obj.name), "config": client.queue_config(obj.name)}
            except (redis.RedisError, QueueError):
                cache[obj.name] = None
        return cache[obj.name]

    @admin.display(description="waiting")
    def waiting(self, obj):
        live = self._live(obj)
        return "—" if live is None else live["depth"]

    @admin.display(description="in flight")
    def in_flight(self, obj):
        live = self._live(obj)
        return "—" if live is None else live["in_flight"]

    @admin.display(description="workers see")
    def workers_see(self, obj):
        live = self._live(obj)
        if live is None:
            return "unavailable"
        return "this config" if live["config"] == obj.to_config() else "a different config: save again"

    @admin.action(description="Pause selected queues", permissions=["change"])
    def pause_queues(self, request, queryset):
        self._set_paused(request, queryset, True)

    @admin.action(description="Resume selected queues", permissions=["change"])
    def resume_queues(self, request, queryset):
        self._set_paused(request, queryset, False)

    def _set_paused(self, request, queryset, paused: bool) -> None:
        done, failed = [], []
        for queue in queryset:
            try:
                # the database follows Redis, or neither changes
                operations.set_paused(queue.name, paused, actor=Actor.admin(request.user))
            except redis.RedisError:
                failed.append(queue.name)
                continue
            done.append(queue.name)
        verb = "Paused" if paused else "Resumed"
        if done:
            messages.success(request, f"{verb} {len(done)} queue(s): {', '.join(done)}.")
        if failed:
            messages.error(request, f"Redis is unreachable; not changed: {', '.join(failed)}.")
