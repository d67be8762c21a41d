"""Requests in the admin: the history (read-only: act on requests in the
dashboard) and periodic requests (saving publishes them to Redis,
core/periodic.py; run now, pause and resume are operations)."""
from __future__ import annotations

import redis
from django.contrib import admin, messages
from django.db import transaction
from django.urls import reverse
from django.utils.html import format_html

from queueadmin.core import operations
from queueadmin.core import periodic as periodic_web
from queueadmin.core.admin.audited import AuditedAdmin
from queueadmin.core.audit import Actor
from queueadmin.core.engine.client.queue_client import QueueError
from queueadmin.core.models import PeriodicRequest, RequestRecord


@admin.register(RequestRecord)
class RequestRecordAdmin(admin.ModelAdmin):
    """The history of requests: read-only (act on requests in the dashboard)."""

    list_display = ("id", "queue", "processor", "state", "priority", "progress", "created_at", "finished_at",
                    "submitted_by", "items_start")
    list_filter = ("state", "queue", "processor", "created_at")
    search_fields = ("=id", "dedup_key", "items_preview")
    date_hierarchy = "created_at"
    list_select_related = ("submitted_by",)
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="done / failed / total")
    def progress(self, obj):
        return f"{obj.done} / {obj.failed} / {obj.total}"

    @admin.display(description="items")
    def items_start(self, obj):
        text = obj.items_preview.replace("\n", " · ")
        return text[:80] + ("…" if len(text) > 80 else "")


# -- periodic requests --------------------------------------------------------


@admin.register(PeriodicRequest)
class PeriodicRequestAdmin(AuditedAdmin):
    """Saving publishes the schedule to Redis (core/periodic.py); workers read
    it there on their next tick. Next and last run are copied from Redis when
    the list is shown."""

    form = periodic_web.PeriodicRequestForm
    list_display = ("name", "enabled", "queue", "processor", "timing", "catch_up", "next_run_at", "last_run_at",
                    "last_request")
    list_filter = ("enabled", "queue", "catch_up")
    search_fields = ("name", "processor")
    actions = ("run_now", "pause", "resume")
    readonly_fields = ("last_run_at", "last_request_id", "next_run_at")
    fieldsets = (
        (None, {"fields": ("name", "enabled", "queue", "processor")}),
        ("Items", {"fields": ("items", "items_are_json")}),
        ("When", {"fields": ("cron", "interval_seconds", "timezone", "catch_up")}),
        ("Request options", {"fields": ("priority", "concurrency", "time_limit_seconds", "group")}),
        ("Runs", {"fields": ("last_run_at", "last_request_id", "next_run_at")}),
    )

    def audit_queue(self, obj) -> str:
        return obj.queue_id or ""

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields + (("name",) if obj is not None else ())  # Redis knows it by name

    def changelist_view(self, request, extra_context=None):
        try:
            periodic_web.mirror()
        except redis.RedisError:
            messages.warning(request, "Redis is unreachable: next and last runs may be out of date.")
        return super().changelist_view(request, extra_context)

    def save_model(self, request, obj, form, change):
        try:
            super().save_model(request, obj, form, change)
        except redis.RedisError:  # went away after the form's check: published when the list is next shown
            messages.warning(request, f"{obj.name} was saved, but Redis could not be told yet; it is published "
                                      "when this list or the Scheduled page is next shown.")

    @admin.display(description="when")
    def timing(self, obj):
        return f"cron {obj.cron} ({obj.timezone})" if obj.cron else f"every {obj.interval_seconds} s"

    @admin.display(description="last request")
    def last_request(self, obj):
        if not obj.last_request_id:
            return "—"
        return format_html('<a href="{}">{}</a>', reverse("queueadmin:request_detail", args=[obj.last_request_id]),
                           obj.last_request_id)

    @admin.action(description="Run selected periodic requests now", permissions=["change"])
    def run_now(self, request, queryset):
        done = []
        for obj in queryset:
            try:
                done.append(operations.run_periodic(obj, request.user, actor=Actor.admin(request.user)))
            except (QueueError, ValueError, redis.RedisError) as exc:
                messages.error(request, f"{obj.name}: {exc}")
        if done:
            messages.success(request, f"Submitted {len(done)} request(s): {', '.join(done)}.")

    @admin.action(description="Pause selected periodic requests", permissions=["change"])
    def pause(self, request, queryset):
        self._set_enabled(request, queryset, False)

    @admin.action(description="Resume selected periodic requests", permissions=["change"])
    def resume(self, request, queryset):
        self._set_enabled(request, queryset, True)

    def _set_enabled(self, request, queryset, enabled: bool) -> None:
        done, failed = [], []
        for obj in queryset:
            try:
                with transaction.atomic():  # the row follows Redis, or neither changes
                    operations.set_periodic_enabled(obj, enabled, actor=Actor.admin(request.user))
            except (redis.RedisError, QueueError, ValueError):
                failed.append(obj.name)
                continue
            done.append(obj.name)
        if done:
            messages.success(request, f"{'Resumed' if enabled else 'Paused'} {len(done)}: {', '.join(done)}.")
        if failed:
            messages.error(request, f"Not changed (Redis unreachable or a bad definition): {', '.join(failed)}.")
