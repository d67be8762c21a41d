"""The Django admin: queue configuration, API tokens, request history, users.

Saving a Queue pushes its configuration to Redis (core.signals), which is
what running workers read, so a change here reaches them without a restart.
The form refuses to save while Redis is unreachable, so the database and
the workers never silently disagree. Queues cannot be deleted here (a
worker serving a vanished queue would fail): pause them instead.
"""
from __future__ import annotations

import contextvars
from dataclasses import fields

import redis
from django import forms
from django.contrib import admin, messages
from django.contrib.auth import admin as auth_admin
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction

from . import services
from .engine.client import QueueError
from .engine.config import QueueConfig
from .models import ApiToken, Queue, RequestRecord

admin.site.site_header = "queueadmin administration"
admin.site.site_title = "queueadmin admin"
admin.site.index_title = "Queues, tokens and users"

_live_cache: contextvars.ContextVar[dict | None] = contextvars.ContextVar("queue_live", default=None)

BACKEND_DOWN = "The queue backend (Redis) is unreachable, so workers cannot be told; nothing was saved. Try again."


# -- queues -------------------------------------------------------------------


class QueueForm(forms.ModelForm):
    class Meta:
        model = Queue
        fields = "__all__"

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
        try:
            services.redis_client().ping()
        except redis.RedisError:
            raise ValidationError(BACKEND_DOWN) from None
        return data


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    form = QueueForm
    list_display = ("name", "paused", "priority", "concurrency", "lease_seconds", "max_attempts",
                    "retention_seconds", "waiting", "in_flight", "workers_see")
    list_filter = ("paused",)
    search_fields = ("name",)
    actions = ("pause_queues", "resume_queues")
    fieldsets = (
        (None, {"fields": ("name", "paused")}),
        ("Request defaults", {"fields": ("priority", "concurrency")}),
        ("Delivery and retries", {"fields": ("lease_seconds", "max_attempts", "backoff_seconds",
                                             "backoff_max_seconds")}),
        ("Retention", {"fields": ("retention_seconds",)}),
    )

    def get_readonly_fields(self, request, obj=None):
        return ("name",) if obj is not None else ()  # a renamed queue would strand its work

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
                client = services.engine()
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
            queue.paused = paused
            try:
                with transaction.atomic():  # the database follows Redis, or neither changes
                    queue.save(update_fields=["paused"])
            except redis.RedisError:
                failed.append(queue.name)
                continue
            done.append(queue.name)
        verb = "Paused" if paused else "Resumed"
        if done:
            messages.success(request, f"{verb} {len(done)} queue(s): {', '.join(done)}.")
        if failed:
            messages.error(request, f"Redis is unreachable; not changed: {', '.join(failed)}.")


# -- API tokens ---------------------------------------------------------------


class ApiTokenForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = ("user", "name")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    form = ApiTokenForm
    list_display = ("prefix", "name", "user", "created_at", "last_used_at")
    list_select_related = ("user",)
    search_fields = ("prefix", "name", "user__username")
    list_filter = ("user",)
    readonly_fields = ("prefix", "created_at", "last_used_at")

    def get_fields(self, request, obj=None):
        return ("user", "name") if obj is None else ("user", "name", "prefix", "created_at", "last_used_at")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("user", "prefix", "created_at", "last_used_at")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user":
            kwargs["queryset"] = get_user_model().objects.filter(is_active=True)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        token, key = ApiToken.issue(obj.user, obj.name)  # one place makes keys and hashes them
        vars(obj).update(vars(token))
        messages.warning(request, f"The new API key for {obj.user} is {key} — copy it now: it is not stored "
                                  "and will not be shown again.")


# -- request history ----------------------------------------------------------


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


# -- users: the stock admin, plus each user's tokens -------------------------


class ApiTokenInline(admin.TabularInline):
    model = ApiToken
    extra = 0
    fields = ("prefix", "name", "created_at", "last_used_at")
    readonly_fields = fields
    show_change_link = True
    verbose_name_plural = "API tokens (delete to revoke; add them under API tokens)"

    def has_add_permission(self, request, obj=None):
        return False


User = get_user_model()
if admin.site.is_registered(User) and User._meta.label == "auth.User":
    admin.site.unregister(User)

    @admin.register(User)
    class UserAdmin(auth_admin.UserAdmin):
        inlines = (ApiTokenInline,)
