"""Submit a request from a form: items from a textarea or an uploaded file."""
from django.contrib import messages
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods
from django_htmx.http import HttpResponseClientRedirect

import redis

from queueadmin.core import operations, queries
from queueadmin.core.engine.client.queue_client import QueueError
from queueadmin.core.engine.errors import describe
from queueadmin.core.forms import SubmitForm

from .common import act_required, page


@never_cache
@require_http_methods(["GET", "POST"])
@act_required
def submit(request):
    queues = queries.queue_names()
    default = request.GET.get("queue") if request.GET.get("queue") in queues else ("default" if "default" in queues else None)
    if request.method == "POST":
        try:
            form = SubmitForm(request.POST, request.FILES, queues=queues)
            valid = form.is_valid()
        except (RequestDataTooBig, TooManyFieldsSent):
            messages.error(request, "The form is too large: upload the items as a file instead.")
            form, valid = SubmitForm(queues=queues, default_queue=default), False
        if valid:
            d = form.cleaned_data
            try:
                sub = operations.submit(
                    d["queue"], d["processor"], d["item_list"], user=request.user, priority=d["priority"],
                    concurrency=d["concurrency"], delay=d["delay"], expires_in=d["expires_in_seconds"],
                    dedup_key=d["dedup_key"] or None, time_limit=d["time_limit_seconds"],
                    rate_limit=d.get("rate_limit") or None,
                    group=d.get("group") or None,
                    callback_url=d.get("callback_url"),
                    then={"processor": d["then_processor"], "mode": d.get("then_mode") or "each"}
                    if d.get("then_processor") else None)
            except QueueError as exc:
                messages.error(request, f"Not submitted: {exc}.")
            except redis.RedisError as exc:  # full, read-only...: keep the form filled in, say why
                messages.error(request, f"Not submitted: {describe(exc)}.")
                return page(request, "queueadmin/submit.html", {"form": form}, "submit", status=503)
            else:
                if sub.duplicate:
                    messages.warning(request, "An identical request is already pending or running, so nothing "
                                              "new was submitted: this is the existing request.")
                else:
                    n = len(d["item_list"])
                    when = " (scheduled)" if sub.scheduled else ""
                    messages.success(request, f"Submitted {n:,} item{'s' if n != 1 else ''}{when}.")
                url = reverse("queueadmin:request_detail", args=[sub.id])
                if request.htmx:
                    return HttpResponseClientRedirect(url)
                return redirect(url)
    else:
        form = SubmitForm(queues=queues, default_queue=default)
    return page(request, "queueadmin/submit.html", {"form": form}, "submit")
