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
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.utils import timezone
from django.utils.html import format_html

from . import auth, services
from . import periodic as periodic_web
from queueadmin.core.engine.features import ratelimit
from queueadmin.core.engine.client.queue_client import QueueError
from .engine.config import QueueConfig
from .models import ApiToken, PeriodicRequest, Queue, RequestRecord

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

    def clean_rate_limit(self):
        try:
            return ratelimit.canonical(self.cleaned_data.get("rate_limit"))  # stored as `20/s`, whatever was typed
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
        try:
            services.redis_client().ping()
        except redis.RedisError:
            raise ValidationError(BACKEND_DOWN) from None
        return data


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    form = QueueForm
    list_display = ("name", "paused", "priority", "concurrency", "lease_seconds", "time_limit_seconds",
                    "rate_limit", "max_attempts", "retention_seconds", "waiting", "in_flight", "workers_see")
    list_filter = ("paused",)
    search_fields = ("name",)
    actions = ("pause_queues", "resume_queues")
    fieldsets = (
        (None, {"fields": ("name", "paused")}),
        ("Request defaults", {"fields": ("priority", "concurrency")}),
        ("Throughput", {"fields": ("rate_limit",)}),
        ("Delivery and retries", {"fields": ("lease_seconds", "time_limit_seconds", "max_attempts",
                                             "backoff_seconds", "backoff_max_seconds", "unrunnable_seconds")}),
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
    """Issuing a token: only a superuser picks another owner, and the scopes
    never go beyond the owner's own permissions (core.auth.grant_error)."""

    scopes = forms.MultipleChoiceField(
        choices=[(s, s) for s in auth.SCOPES], widget=forms.CheckboxSelectMultiple,
        help_text="read: requests, results, queues (staff); submit: new requests; steer: cancel, priority, "
                  "concurrency, requeue, retry (submit and steer need queueadmin.change_requestrecord); "
                  "metrics: /metrics.")

    class Meta:
        model = ApiToken
        fields = ("user", "name", "scopes", "expires_at")

    issuer = None  # the signed-in user; ApiTokenAdmin.get_form sets it

    def clean_expires_at(self):
        expires_at = self.cleaned_data.get("expires_at")
        if expires_at is not None and expires_at <= timezone.now():
            raise ValidationError("The expiry must lie in the future.")
        return expires_at

    def clean(self):
        data = super().clean()
        owner, scopes = data.get("user"), data.get("scopes")
        if owner is not None and scopes:
            problem = auth.grant_error(self.issuer, owner, scopes)
            if problem:
                raise ValidationError(problem[0].upper() + problem[1:] + ".")
        return data


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens: shown once, revoked at once (delete, or the revoke action).
    A non-superuser sees and issues only their own tokens."""

    form = ApiTokenForm
    list_display = ("prefix", "name", "user", "scopes", "created_at", "expires_at", "last_used_at", "state")
    list_select_related = ("user",)
    search_fields = ("prefix", "name", "user__username")
    readonly_fields = ("prefix", "created_at", "last_used_at")
    actions = ("revoke",)

    def get_list_filter(self, request):
        # by owner for superusers only (and only owners of tokens): the stock
        # filter would list every username to staff who see only their own
        return (("user", admin.RelatedOnlyFieldListFilter),) if request.user.is_superuser else ()

    def get_queryset(self, request):
        tokens = super().get_queryset(request)
        return tokens if request.user.is_superuser else tokens.filter(user=request.user)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"issuer": request.user})

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("user", "name", "scopes", "expires_at")
        return ("user", "name", "scopes", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("user", "scopes", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user":  # only a superuser issues for others
            users = get_user_model().objects.filter(is_active=True)
            kwargs["queryset"] = users if request.user.is_superuser else users.filter(pk=request.user.pk)
            kwargs["initial"] = request.user.pk
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def _own(self, request, obj):
        return obj is None or request.user.is_superuser or obj.user_id == request.user.pk

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) and self._own(request, obj)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and self._own(request, obj)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and self._own(request, obj)

    @admin.display(description="state")
    def state(self, obj):
        if obj.revoked_at is not None:
            return "revoked"
        return "active" if obj.usable() else "expired"

    @admin.action(description="Revoke selected API tokens (refused at once)", permissions=["change"])
    def revoke(self, request, queryset):
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        messages.success(request, f"Revoked {count} API token(s).")

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        problem = auth.grant_error(request.user, obj.user, form.cleaned_data["scopes"])  # the form said so too
        if problem:
            raise PermissionDenied(problem)
        token, key = ApiToken.issue(obj.user, obj.name, form.cleaned_data["scopes"], obj.expires_at)
        vars(obj).update(vars(token))
        request.queueadmin_issued = key  # shown by response_add, on this response only

    def response_add(self, request, obj, post_url_continue=None):
        """The new key and its webhook secret are shown on the answer to the
        POST itself, never put in a message: messages may travel in a
        readable cookie (Django's default storage) and come back later."""
        key = getattr(request, "queueadmin_issued", None)
        if key is None:
            return super().response_add(request, obj, post_url_continue)
        context = {**self.admin_site.each_context(request), "title": "API token issued", "opts": self.opts,
                   "token": obj, "key": key, "changelist": reverse("admin:queueadmin_apitoken_changelist"),
                   "change": reverse("admin:queueadmin_apitoken_change", args=[obj.pk])}
        response = TemplateResponse(request, "queueadmin/admin_token_issued.html", context)
        add_never_cache_headers(response)  # no copy in a browser's or a proxy's cache
        return response


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


# -- periodic requests --------------------------------------------------------


@admin.register(PeriodicRequest)
class PeriodicRequestAdmin(admin.ModelAdmin):
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
        ("Request options", {"fields": ("priority", "concurrency", "time_limit_seconds")}),
        ("Runs", {"fields": ("last_run_at", "last_request_id", "next_run_at")}),
    )

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
                done.append(periodic_web.run_now(obj, request.user))
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
                    periodic_web.set_enabled(obj, enabled)
            except (redis.RedisError, QueueError, ValueError):
                failed.append(obj.name)
                continue
            done.append(obj.name)
        if done:
            messages.success(request, f"{'Resumed' if enabled else 'Paused'} {len(done)}: {', '.join(done)}.")
        if failed:
            messages.error(request, f"Not changed (Redis unreachable or a bad definition): {', '.join(failed)}.")


# -- users: the stock admin, plus each user's tokens -------------------------


class ApiTokenInline(admin.TabularInline):
    model = ApiToken
    extra = 0
    fields = ("prefix", "name", "scopes", "created_at", "expires_at", "last_used_at", "revoked_at")
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
