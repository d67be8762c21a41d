"""`manage.py queue_token USERNAME [--name N] [--scopes S] [--expires-in T]`:
print a new API key for a user.

Only the key's hash is stored, so this is the one chance to copy it. The key
alone goes to stdout (for scripts); the notice goes to stderr. Scopes never
go beyond the user's own permissions (core.auth.grant_error); without
--scopes the token gets what the user's permissions back of read, submit and
steer. `metrics` may go to any account (a scraper needs no staff rights).
Each token issued is recorded in the audit log (core/audit.py).
"""
import re
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError
from django.utils import timezone

from queueadmin.core import audit, auth
from queueadmin.core.audit import Actor
from queueadmin.core.models import ApiToken

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_LIFETIME = timedelta(days=10 * 365)


def lifetime(text: str) -> timedelta:
    """'90d', '12h', '30m', '45s', '2w', or plain seconds."""
    match = re.fullmatch(r"\s*(\d{1,9})\s*([smhdw]?)\s*", text or "")
    if not match or int(match[1]) == 0:
        raise CommandError(f"--expires-in {text!r}: give a positive number with a unit s, m, h, d or w (e.g. 90d)")
    value = timedelta(seconds=int(match[1]) * UNITS[match[2] or "s"])
    if value > MAX_LIFETIME:
        raise CommandError("--expires-in is too long (at most 10 years; leave it out for a token that never expires)")
    return value


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print its key (shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label for the token, e.g. the producer using it")
        parser.add_argument("--scopes", default=None,
                            help=f"comma-separated, of {', '.join(auth.SCOPES)} (default: what the user's "
                                 "permissions allow of read, submit, steer)")
        parser.add_argument("--expires-in", default=None, metavar="TIME",
                            help="lifetime, e.g. 90d, 12h, 30m (default: never expires)")

    def handle(self, *args, username, name, scopes, expires_in, **options):
        User = get_user_model()
        if len(name) > ApiToken._meta.get_field("name").max_length:
            raise CommandError("--name is too long (at most 100 characters)")
        expires_at = timezone.now() + lifetime(expires_in) if expires_in is not None else None
        try:
            wanted = auth.parse_scopes(scopes) if scopes is not None else None
        except ValueError as exc:
            raise CommandError(f"--scopes: {exc}") from None
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: username})
            if not user.is_active:
                raise CommandError(f"user {username!r} is inactive: its tokens would be refused")
            if wanted is None:
                wanted = auth.parse_scopes(auth.user_scopes(user) & set(auth.DEFAULT_SCOPES))
                if not wanted:
                    raise CommandError(f"user {username!r} may neither read nor act (not staff, no "
                                       "queueadmin.change_requestrecord); give --scopes metrics for a scraper account")
            problem = auth.grant_error(None, user, wanted)
            if problem:
                raise CommandError(problem)
            token, key = ApiToken.issue(user, name, wanted, expires_at)
            audit.record(Actor.command("queue_token"), "issue_token", target=f"API token {token}",
                         detail={"name": name, "scopes": list(wanted), "expires_at": expires_at})
        except User.DoesNotExist:
            raise CommandError(f"unknown user {username!r}") from None
        except DatabaseError as exc:
            raise CommandError(f"database error ({' '.join(str(exc).split())}); has `manage.py migrate` run?") from None
        until = f", expires {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else ""
        self.stderr.write(f"API token {token.prefix}… for {username} (scopes: {' '.join(wanted)}{until}); "
                          "copy the key now, it is not shown again:")
        self.stdout.write(key)
        self.stderr.write(f"its webhook signing secret (docs/usage.md \"Webhooks\"), not shown again either: "
                          f"{token.webhook_secret}")
