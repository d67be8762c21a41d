"""Login throttling: django-axes' check, first in AUTHENTICATION_BACKENDS.

Every login form (dashboard and admin) passes the request, so axes counts
failures per username and address. Code that authenticates without a request
(the test client's login(), scripts) has no address to count and is not
throttled here, where axes itself would raise.
"""
from axes.backends import AxesStandaloneBackend


class LoginThrottleBackend(AxesStandaloneBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
