"""The admin's edits in the audit log (core/audit.py).

Django's admin already calls `log_addition`, `log_change` and
`log_deletions` for every add, change and delete (its own history, which
only admin users see); `AuditedAdmin` records the same edits as audit
entries too, so the Activity page shows who changed a queue's settings,
issued or deleted a token or edited a periodic request. What the admin's
actions change in the queue itself (pause, run now) goes through
core/operations.py with an admin actor and is recorded there.
"""
from __future__ import annotations

from django.contrib import admin

from queueadmin.core import audit
from queueadmin.core.audit import Actor


class AuditedAdmin(admin.ModelAdmin):
    """A ModelAdmin whose adds, changes and deletes each leave an audit entry."""

    def log_addition(self, request, obj, message):
        entry = super().log_addition(request, obj, message)
        self._audit(request, "admin_add", obj, message)
        return entry

    def log_change(self, request, obj, message):
        entry = super().log_change(request, obj, message)
        self._audit(request, "admin_change", obj, message)
        return entry

    def log_deletions(self, request, queryset):
        entries = super().log_deletions(request, queryset)
        for obj in queryset:  # called before the deletion: the objects are still there to name
            self._audit(request, "admin_delete", obj, "")
        return entries

    def audit_queue(self, obj) -> str:
        """The queue an object belongs to, for the Activity page's queue filter."""
        return ""

    def _audit(self, request, action: str, obj, message) -> None:
        audit.record(Actor.admin(request.user), action, queue=self.audit_queue(obj),
                     target=f"{obj._meta.verbose_name} {obj}",
                     detail={"model": obj._meta.model_name, "object_id": str(obj.pk), "changes": message or []})
