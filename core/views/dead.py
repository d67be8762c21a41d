"""Dead letters: items that failed every attempt, with error and traceback;
retry or discard one, a selection, or everything matching the filter."""
from collections import defaultdict

from django.contrib import messages
from django.http import QueryDict
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from queueadmin.core import operations, queries
from queueadmin.core.audit import Actor
from queueadmin.core.engine.client.queue_client import QueueError

from .common import RID, act_required, confirm, page, selected_pairs, staff_required

PAGE_SIZE = 50


def _filters(params):
    queue = params.get("queue") or None
    if queue and queue not in queries.queue_names():
        queue = None
    rid = params.get("request") or None
    if rid and not RID.match(rid):
        rid = None
    return queue, rid


def dead_context(params) -> dict:
    queue, rid = _filters(params)
    found = queries.dead_page(queue, rid, params.get("page"), PAGE_SIZE)
    pg = found["pg"]
    q = params.copy()
    q.pop("page", None)
    return {"rows": found["rows"], "pg": pg, "count": found["count"], "queue": queue or "", "request_id": rid or "",
            "queues": queries.queue_names(), "filter_qs": q.urlencode(),
            "live_topic": f"dead:{queue or ''}:{rid or ''}:{pg.number}"}


@never_cache
@require_GET
@staff_required
def dead(request):
    return page(request, "queueadmin/dead.html", dead_context(request.GET), "dead")


@never_cache
@require_POST
@act_required
def dead_action(request):
    action, scope = request.POST.get("action"), request.POST.get("scope", "selected")
    op = request.POST.get("op", "")
    if op.count("-") == 1:  # the bulk bar's buttons: "retry-selected", "discard-all", ...
        action, scope = op.split("-")
    filt = request.POST.get("filter", "")
    back = reverse("queueadmin:dead") + (f"?{filt}" if filt else "")
    if action not in ("retry", "discard"):
        messages.error(request, "Unknown action.")
        return redirect(back)
    if scope == "all":
        queue, rid = _filters(QueryDict(filt))
        pairs = queries.dead_pairs(queue, rid)
    else:
        pairs = selected_pairs(request.POST.getlist("ids"))
    if not pairs:
        messages.info(request, "Nothing selected: tick some rows first.")
        return redirect(back)
    n = len(pairs)
    needs_confirm = scope != "one" or action == "discard"
    if needs_confirm and request.POST.get("confirm") != "1":
        text = (f"Retry {n:,} dead letter{'s' if n != 1 else ''}? Each runs again from its first attempt."
                if action == "retry" else
                f"Discard {n:,} dead letter{'s' if n != 1 else ''}? They stay failed in their request's results "
                f"and can no longer be retried.")
        return confirm(request, title=f"{action.capitalize()} dead letters", count=n, text=text,
                       danger=action == "discard", action_url=reverse("queueadmin:dead_action"),
                       fields=[("action", action), ("scope", scope), ("filter", filt)] + (
                           [("ids", f"{r}:{e}") for r, e in pairs] if scope != "all" else []),
                       back_url=back, section="dead")
    by_rid = defaultdict(list)
    for rid, eid in pairs:
        by_rid[rid].append(eid)
    done, errors = 0, []
    for rid, eids in by_rid.items():
        try:
            who = Actor.dashboard(request.user)
            done += (operations.retry_dead(rid, eids, actor=who) if action == "retry"
                     else operations.discard(rid, eids, actor=who))
        except QueueError as exc:
            errors.append(str(exc))
    verb = "Sent back" if action == "retry" else "Discarded"
    messages.success(request, f"{verb} {done:,} item{'s' if done != 1 else ''}.")
    for e in errors[:3]:
        messages.error(request, f"Skipped: {e}.")
    return redirect(back)
