"""`{% request_activity rid as activity %}` and `{% queue_activity name as
activity %}`: the audit entries that touched a request or a queue, for the
partials their pages include (templates/queueadmin/_request_activity.html,
_queue_activity.html), so their views need no change to show them."""
from django import template

from queueadmin.core.queries import activity

register = template.Library()


@register.simple_tag
def request_activity(rid: str) -> dict:
    entries, total = activity.for_request(str(rid))
    return {"entries": entries, "total": total}


@register.simple_tag
def queue_activity(name: str) -> dict:
    entries, total = activity.for_queue(str(name))
    return {"entries": entries, "total": total}
