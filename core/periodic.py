"""Periodic requests, Django side: the admin's PeriodicRequest rows are
published to Redis on save and delete (workers fire them from there:
core/engine/features/periodic.py), last and next run are copied back into
the rows, and the admin's form.

The database is the source of truth for definitions: a save publishes at
once (Redis trouble fails the save) and again after the commit (`settle`);
`mirror` (run when the Scheduled page or the admin list is shown) publishes
any enabled schedule Redis lacks (after a flush, or a save while Redis was
away) and removes paused or deleted ones it still has. Running one now,
pausing and resuming are operations (core/operations.py: `run_periodic`,
`set_periodic_enabled`).
"""
from __future__ import annotations

import logging
from datetime import datetime, timezone

import redis
from django import forms
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from queueadmin.core import clients, conf
from queueadmin.core.engine.features import periodic
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.forms import BACKEND_DOWN
from queueadmin.core.models import PeriodicRequest

log = logging.getLogger("queueadmin")


@receiver(post_save, sender=PeriodicRequest)
def _saved(sender, instance, raw=False, **kwargs):
    if not raw:  # fixtures (loaddata) publish through `mirror`
        publish(instance)  # now, so that Redis trouble fails the save (its transaction rolls back)
        transaction.on_commit(lambda name=instance.name: settle(name))


@receiver(post_delete, sender=PeriodicRequest)
def _deleted(sender, instance, **kwargs):
    periodic.remove(clients.engine(), instance.name, forget=True)
    transaction.on_commit(lambda name=instance.name: settle(name))


def settle(name: str) -> None:
    """After a commit, make Redis match the row once more: a `mirror` running
    while the transaction was open saw the database without it (and may have
    removed a new schedule as a stray, or re-published a deleted one)."""
    obj = PeriodicRequest.objects.filter(name=name).first()
    try:
        if obj is None:
            periodic.remove(clients.engine(), name, forget=True)
        else:
            publish(obj)
    except (redis.RedisError, QueueError, ValueError):
        log.warning("periodic request %s: Redis not brought in step after the commit; `mirror` will", name)


def publish(obj: PeriodicRequest) -> None:
    client = clients.engine()
    if obj.enabled:
        periodic.define(client, obj.to_definition())
    else:
        periodic.remove(client, obj.name)


def _dt(ms):
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc) if ms else None


def mirror() -> list[tuple[PeriodicRequest, dict]]:
    """Bring Redis and the rows in step: publish what Redis lacks, remove what
    is paused or gone, copy next and last run into the rows. Returns each row
    with its live figures: next (ms or None), last (the last fire's state: at,
    due, request, error; {} before the first)."""
    client = clients.engine()
    objs = list(PeriodicRequest.objects.all())
    names = [o.name for o in objs]
    for stray in set(client.redis.hkeys(client.keys.periodic.defs)) - set(names):
        periodic.remove(client, stray, forget=True)  # deleted while Redis was away
    if not names:
        return []
    present = dict(zip(names, client.redis.hmget(client.keys.periodic.defs, names)))
    for o in objs:
        if o.enabled and not present[o.name]:
            try:
                periodic.define(client, o.to_definition())
            except (QueueError, ValueError):
                pass  # a row the current code refuses (e.g. a processor since removed): shown, not fired
        elif not o.enabled and present[o.name]:
            periodic.remove(client, o.name)
    nexts, lasts = periodic.next_runs(client, names), periodic.last_runs(client, names)
    out = []
    for o in objs:
        last = lasts.get(o.name, {})
        values = {"next_run_at": _dt(nexts.get(o.name)), "last_run_at": _dt(last.get("at")) or o.last_run_at,
                  "last_request_id": last.get("request") or o.last_request_id}
        if any(getattr(o, k) != v for k, v in values.items()):
            PeriodicRequest.objects.filter(pk=o.pk).update(**values)  # no signal: nothing to publish
            for k, v in values.items():
                setattr(o, k, v)
        out.append((o, {"next": nexts.get(o.name), "last": last}))
    return out


# -- the admin form -------------------------------------------------------------


class PeriodicRequestForm(forms.ModelForm):
    """Every check a worker would make, as form errors: cron, time zone,
    processor, items (JSON lines), and Redis reachable (saving publishes)."""

    processor = forms.ChoiceField(choices=())

    class Meta:
        model = PeriodicRequest
        fields = "__all__"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        known = sorted(conf.processors())
        current = self.instance.processor if self.instance.pk else ""
        self.fields["processor"].choices = [(p, p) for p in known] + (
            [(current, f"{current} (unknown)")] if current and current not in known else [])
        self.fields["processor"].error_messages["invalid_choice"] = "Unknown processor %(value)s."
        self.fields["items"].strip = False  # items are taken as typed, as the submit form does

    def clean_processor(self):
        name = self.cleaned_data["processor"]
        if name not in conf.processors():
            raise ValidationError(f"Unknown processor {name}: workers could not run it.")
        return name

    def clean_timezone(self):
        return _as_form_error(periodic.check_zone, self.cleaned_data["timezone"].strip())

    def clean_cron(self):
        expr = " ".join(self.cleaned_data["cron"].split())
        return _as_form_error(periodic.check_cron, expr) if expr else ""

    def clean(self):
        data = super().clean()
        if bool(data.get("cron")) == bool(data.get("interval_seconds")) and not self.has_error("cron"):
            raise ValidationError("Give either a cron expression or an interval in seconds (exactly one).")
        if self.errors:
            return data
        row = PeriodicRequest(**{k: v for k, v in data.items() if k in {f.name for f in PeriodicRequest._meta.fields}})
        try:
            row.item_list()
        except ValueError as exc:
            self.add_error("items", f"Items are JSON lines, but {exc}.")
            return data
        except RecursionError:  # json.loads of a line nested past Python's limit
            self.add_error("items", "Items are JSON lines, but a line is nested too deeply.")
            return data
        try:
            row.to_definition().check()
        except QueueError as exc:
            self.add_error("items" if "item" in str(exc) else None, str(exc)[0].upper() + str(exc)[1:] + ".")
            return data
        try:
            clients.redis_client().ping()
        except redis.RedisError:
            raise ValidationError(BACKEND_DOWN) from None
        return data


def _as_form_error(check, value):
    try:
        check(value)
    except QueueError as exc:
        raise ValidationError(str(exc)[0].upper() + str(exc)[1:] + ".") from None
    return value
