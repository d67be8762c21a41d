"""Dead letters: items that failed every attempt, with error and traceback;
search them by error text, processor, queue and time; retry or discard one,
a selection, or everything the filter matches (a bulk job with progress)."""
from collections import defaultdict
from urllib.parse import urlencode

from django.contrib import messages
from django.http import QueryDict
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from queueadmin.core import bulk_operations, deadfilter, operations, queries
from queueadmin.core.audit import Actor
from queueadmin.core.engine.client.queue_client import QueueError

from .bulk import JOB_ID, go
from .common import act_required, confirm, page, selected_pairs, staff_required

PAGE_SIZE = 50


def dead_context(params) -> dict:
    parsed = deadfilter.parse(params, queries.queue_names())
    flt, rid = parsed.flt, parsed.request
    query = parsed.query()
    ctx = {"queue": flt.queue, "request_id": rid or "", "processor": flt.processor, "text": flt.text,
           "since": query.get("from", ""), "until": query.get("to", ""), "queues": queries.queue_names(),
           "filter_qs": urlencode(query), "filter_errors": parsed.errors, "searching": parsed.searching,
           "bulk": _job(params.get("bulk", ""))}
    if parsed.searching:
        ctx.update(_search(params, parsed))
        return ctx
    found = queries.dead_page(flt.queue or None, rid, params.get("page"), PAGE_SIZE, processor=flt.processor)
    pg = found["pg"]
    live = f"dead:{flt.queue}:{rid or ''}:{pg.number}" if not flt.processor else ""  # the topic carries no processor
    # "N+" when a queue's live requests were sampled (queries.started_meta): a million waiting
    # requests are not read on every refresh
    label = f"{found['count']:,}" + ("+" if found["sampled"] else "")
    return {**ctx, "rows": found["rows"], "pg": pg, "count": found["count"], "count_label": label,
            "exact": not found["sampled"], "live_topic": live}


def _search(params, parsed) -> dict:
    """A page of a search that reads records: from a cursor, "N+" when the
    bounded walk did not reach the end."""
    cursor = params.get("cursor") or None
    try:
        found = queries.dead_search(parsed.flt, parsed.request, cursor, PAGE_SIZE)
    except QueueError as exc:  # a cursor this page did not make
        parsed.errors.append(f"{exc}: showing the first page.")
        cursor, found = None, queries.dead_search(parsed.flt, parsed.request, None, PAGE_SIZE)
    n = found["count"]
    label = f"{n:,}" if found["exact"] and not cursor else f"{n:,}+"
    return {"rows": found["rows"], "pg": queries.Page.of(1, 0, PAGE_SIZE), "count": n, "count_label": label,
            "exact": found["exact"] and not cursor, "next_cursor": found["next"] or "", "cursor": cursor or "",
            "looked": found["looked"], "live_topic": ""}


def _job(jid: str):
    """The bulk job a page shows the progress of (?bulk=<id>), if it is one."""
    return queries.job_view(bulk_operations.bulk_progress(jid)) if JOB_ID.match(jid or "") else None


@never_cache
@require_GET
@staff_required
def dead(request):
    ctx = dead_context(request.GET)
    return page(request, "queueadmin/dead.html", ctx, "dead")  # a bad filter part is named on the page, the rest holds


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
        return _act_on_all(request, action, filt, back)
    pairs = selected_pairs(request.POST.getlist("ids"))
    if not pairs:
        messages.info(request, "Nothing selected: tick some rows first.")
        return redirect(back)
    n = len(pairs)
    if (scope != "one" or action == "discard") and request.POST.get("confirm") != "1":
        return confirm(request, title=f"{action.capitalize()} dead letters", count=n, text=_question(action, f"{n:,}", n),
                       danger=action == "discard", action_url=reverse("queueadmin:dead_action"),
                       fields=[("action", action), ("scope", scope), ("filter", filt)] + [
                           ("ids", f"{r}:{e}") for r, e in pairs], back_url=back, section="dead")
    by_rid = defaultdict(list)
    for rid, eid in pairs:
        by_rid[rid].append(eid)
    done, errors, who = 0, [], Actor.dashboard(request.user)
    for rid, eids in by_rid.items():
        try:
            done += (operations.retry_dead(rid, eids, actor=who) if action == "retry"
                     else operations.discard(rid, eids, actor=who))
        except QueueError as exc:
            errors.append(str(exc))
    verb = "Sent back" if action == "retry" else "Discarded"
    messages.success(request, f"{verb} {done:,} item{'s' if done != 1 else ''}.")
    for e in errors[:3]:
        messages.error(request, f"Skipped: {e}.")
    return redirect(back)


def _act_on_all(request, action: str, filt: str, back: str):
    """Everything the filter matches: a confirmation stating N, then a bulk job
    (batches of 500 on a background thread) whose progress the page shows."""
    parsed = deadfilter.parse(QueryDict(filt), queries.queue_names())
    if parsed.errors:
        for text in parsed.errors:
            messages.error(request, text)
        return redirect(back)
    n, exact, _ = queries.dead_match(parsed.flt, parsed.request)
    if not n:
        messages.info(request, "No dead letter matches this filter.")
        return redirect(back)
    if request.POST.get("confirm") != "1":
        label = f"{n:,}" if exact else f"{n:,}+"
        return confirm(request, title=f"{action.capitalize()} all matching", count=n if exact else label,
                       text=_question(action, label if exact else f"at least {n:,}", n, matching=True),
                       danger=action == "discard", action_url=reverse("queueadmin:dead_action"),
                       fields=[("action", action), ("scope", "all"), ("filter", filt)], back_url=back, section="dead")
    jid = bulk_operations.bulk_dead(action, parsed.flt, parsed.request, actor=Actor.dashboard(request.user))
    return go(request, reverse("queueadmin:dead") + "?" + urlencode({**parsed.query(), "bulk": jid}))


def _question(action: str, label: str, n: int, matching: bool = False) -> str:
    what = f"{label} dead letter{'s' if n != 1 else ''}"
    how = " All that match this filter, in batches of 500." if matching else ""
    if action == "retry":
        return f"Retry {what}?{how} Each runs again from its first attempt."
    return f"Discard {what}?{how} They stay failed in their request's results and can no longer be retried."
