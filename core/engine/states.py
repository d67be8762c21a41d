"""A request's states, as the Lua scripts write them in its meta hash
(lua/_request.lua has the same TERMINAL table).

A base module: the client, the features and the Django side all read these,
and it imports nothing, so that the features (used by the client) need not
import the client to know whether a request is finished.
"""

STATES = ("scheduled", "queued", "running", "completed", "failed", "cancelled", "expired")
TERMINAL = ("completed", "failed", "cancelled", "expired")  # a request in these has ended
