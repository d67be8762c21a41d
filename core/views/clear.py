"""A queue-level clear: cancel every live request of a queue, so that none of
its waiting items runs (items running now are stopped, as a cancel does),
after a confirmation that states how many. Done as a bulk job (batches of
500 requests) whose progress the bulk job page shows."""
from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from queueadmin.core import bulk_operations, queries
from queueadmin.core.audit import Actor

from .bulk import go
from .common import act_required, confirm


@never_cache
@require_POST
@act_required
def queue_clear(request, name):
    back = reverse("queueadmin:queues")
    if name not in queries.queue_names():
        messages.error(request, f"There is no queue named “{name[:64]}”.")
        return redirect(back)
    rids, waiting = queries.clear_targets(name)
    if not rids:
        messages.info(request, f"Queue {name} has nothing waiting: there is nothing to clear.")
        return redirect(back)
    if request.POST.get("confirm") != "1":
        return confirm(request, title=f"Clear queue {name}", count=f"{waiting:,}", danger=True,
                       text=f"Clear queue {name}? {waiting:,} item{'s' if waiting != 1 else ''} not yet finished, in "
                            f"{len(rids):,} live request{'s' if len(rids) != 1 else ''}, will never run: each request "
                            f"is cancelled, and items running now are stopped within about a second.",
                       action_url=reverse("queueadmin:queue_clear", args=[name]), fields=[], back_url=back,
                       section="queues")
    jid = bulk_operations.clear_queue(name, actor=Actor.dashboard(request.user))
    return go(request, reverse("queueadmin:bulk_progress", args=[jid]))
