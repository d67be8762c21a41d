"""`manage.py queue_token USERNAME [--name N]`: print a new API key for a user.

Only the key's hash is stored, so this is the one chance to copy it. The key
alone goes to stdout (for scripts); the notice goes to stderr.
"""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from core.models import ApiToken


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print its key (shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label for the token, e.g. the producer using it")

    def handle(self, *args, username, name, **options):
        User = get_user_model()
        if len(name) > ApiToken._meta.get_field("name").max_length:
            raise CommandError("--name is too long (at most 100 characters)")
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: username})
            if not user.is_active:
                raise CommandError(f"user {username!r} is inactive: its tokens would be refused")
            token, key = ApiToken.issue(user, name)
        except User.DoesNotExist:
            raise CommandError(f"unknown user {username!r}") from None
        except DatabaseError as exc:
            raise CommandError(f"database error ({' '.join(str(exc).split())}); has `manage.py migrate` run?") from None
        self.stderr.write(f"API token {token.prefix}… for {username}; copy the key now, it is not shown again:")
        self.stdout.write(key)
