"""API tokens in the admin: issued with scopes no wider than the owner's
permissions, shown once, revoked at once; and the stock user admin with
each user's tokens."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import admin as auth_admin
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers

from queueadmin.core import audit, auth
from queueadmin.core.admin.audited import AuditedAdmin
from queueadmin.core.audit import Actor
from queueadmin.core.models import ApiToken


class ApiTokenForm(forms.ModelForm):
    """Issuing a token: only a superuser picks another owner, and the scopes
    never go beyond the owner's own permissions (core.auth.grant_error)."""

    scopes = forms.MultipleChoiceField(
        choices=[(s, s) for s in auth.SCOPES], widget=forms.CheckboxSelectMultiple,
        initial=["read"],  # the least a token is for; a first save with nothing ticked would fail
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
class ApiTokenAdmin(AuditedAdmin):
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
        live = queryset.filter(revoked_at__isnull=True)
        names = [str(token) for token in live.select_related("user")]  # named before: update() returns a count
        count = live.update(revoked_at=timezone.now())
        if count:
            audit.record(Actor.admin(request.user), "admin_revoke", target=f"{count} API token(s)", count=count,
                         detail={"model": "apitoken", "tokens": names[:100]})
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
