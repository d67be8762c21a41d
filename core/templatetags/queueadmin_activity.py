"""`{% request_activity rid as activity %}`: the audit entries that touched a
request, for the partial the request page includes
(templates/queueadmin/_request_activity.html), so the request view needs no
change to show them."""
from django import template

from queueadmin.core.queries import activity

register = template.Library()


@register.simple_tag
def request_activity(rid: str) -> dict:
    entries, total = activity.for_request(str(rid))
    return {"entries": entries, "total": total}
