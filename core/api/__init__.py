"""The JSON API for producers in other languages, on django-ninja.

* `app`: the NinjaAPI (schema at /api/openapi.json, docs at /api/docs), the
  versioned routes under /api/v1/ and today's unversioned ones.
* `requests`, `queues`: the operations.
* `schemas`: pydantic models of every request and response body.
* `security`: what each operation checks before reading its input (token,
  rate limit, scope, body size).
* `parsing`: the JSON body parser (UTF-8, valid Unicode, an object).
* `errors`: one error shape, {"error": "...", "code": "..."}, for everything.
* `caps`, `ratelimit`: the limits, from the settings (queueadmin.core.conf).

/metrics is in core.metrics; the ASGI body guard in core.bodylimit.
"""
