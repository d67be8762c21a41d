"""Database side of queueadmin: queue configuration, request history, API tokens.

Redis holds the live queue; the database holds what must outlive it: the
settings edited in the admin and a summary of every request.
"""
import hashlib
import json
import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from queueadmin.core import conf
from queueadmin.core.audit import AuditEntry  # noqa: F401 (defined there, registered with the app here)
from queueadmin.core.engine.config import MAX_CONCURRENCY, QueueConfig
from queueadmin.core.engine.errors import QueueError
from queueadmin.core.engine.features import groups, ratelimit
from queueadmin.core.engine.features.periodic import Definition
from queueadmin.core.scopes import DEFAULT_SCOPES, allows, parse_scopes

_DEFAULTS = QueueConfig()


def unrunnable_default() -> float:
    """A new queue's wait for a worker that can run an item: the UNRUNNABLE_SECONDS setting."""
    return float(conf.get("UNRUNNABLE_SECONDS"))


def validate_rate_limit(value: str) -> None:
    try:
        ratelimit.parse(value)
    except ratelimit.RateLimitError as exc:
        raise ValidationError(str(exc)) from None


class Queue(models.Model):
    name = models.CharField(max_length=64, unique=True,
                            validators=[RegexValidator(r"^[A-Za-z0-9._-]+$", "letters, digits, '.', '_' or '-'")])
    priority = models.PositiveSmallIntegerField(default=_DEFAULTS.priority, validators=[MaxValueValidator(99)],
                                                help_text="Default priority of requests, 0-99 (higher first).")
    concurrency = models.PositiveIntegerField(default=_DEFAULTS.concurrency,
                                              validators=[MinValueValidator(1), MaxValueValidator(MAX_CONCURRENCY)],
                                              help_text="Default per-request concurrency limit.")
    lease_seconds = models.FloatField(default=_DEFAULTS.lease_seconds, validators=[MinValueValidator(0.1)],
                                      help_text="Visibility timeout: an item not acknowledged in time runs again.")
    max_attempts = models.PositiveSmallIntegerField(default=_DEFAULTS.max_attempts, validators=[MinValueValidator(1)])
    backoff_seconds = models.FloatField(default=_DEFAULTS.backoff_seconds, validators=[MinValueValidator(0)],
                                        help_text="First retry delay; doubles with each attempt.")
    backoff_max_seconds = models.FloatField(default=_DEFAULTS.backoff_max_seconds, validators=[MinValueValidator(0)])
    retention_seconds = models.PositiveIntegerField(default=_DEFAULTS.retention_seconds,
                                                    validators=[MinValueValidator(1)],
                                                    help_text="How long a finished request's items stay in Redis.")
    paused = models.BooleanField(default=False)
    time_limit_seconds = models.FloatField(
        default=_DEFAULTS.time_limit_seconds, validators=[MinValueValidator(0)],
        help_text="An item running longer than this is stopped and counts as a failed attempt (0 = no limit).")
    rate_limit = models.CharField(
        max_length=32, blank=True, default="", validators=[validate_rate_limit],
        help_text="At most this many items of the queue start in any window, across all workers: "
                  "20/s, 600/min, 10000/h, 5/10s. Empty: no limit.")
    unrunnable_seconds = models.FloatField(
        default=unrunnable_default, validators=[MinValueValidator(0)],
        help_text="An item that no live worker can run (none has its processor or can import its task) waits "
                  "this long for one, then fails with that reason and the retry policy applies.")
    encrypt = models.BooleanField(
        default=False,
        help_text="Encrypt payloads, results, logs and errors in Redis (AES-GCM) with the keys of "
                  "QUEUEADMIN[\"ENCRYPTION_KEYS\"].")
    group_concurrency = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(MAX_CONCURRENCY)],
        help_text="Default for every group (tenant) of the queue: at most this many items of all the group's "
                  "requests run at once, across all workers (0 = no limit). A group's own limit below overrides it.")
    group_rate_limit = models.CharField(
        max_length=32, blank=True, default="", validators=[validate_rate_limit],
        help_text="Default for every group: at most this many of the group's items start in any window "
                  "(20/s, 600/min). Empty: no limit.")

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def to_config(self) -> QueueConfig:
        return QueueConfig(priority=self.priority, concurrency=self.concurrency, lease_seconds=self.lease_seconds,
                           max_attempts=self.max_attempts, backoff_seconds=self.backoff_seconds,
                           backoff_max_seconds=self.backoff_max_seconds, retention_seconds=self.retention_seconds,
                           paused=self.paused, time_limit_seconds=self.time_limit_seconds,
                           rate_limit=ratelimit.canonical(self.rate_limit),
                           unrunnable_seconds=self.unrunnable_seconds, encrypt=self.encrypt,
                           group_concurrency=self.group_concurrency,
                           group_rate_limit=ratelimit.canonical(self.group_rate_limit))


def validate_group(value: str) -> None:
    try:
        groups.check_group(value)
    except QueueError as exc:
        raise ValidationError(str(exc)) from None


class QueueGroup(models.Model):
    """A group's (tenant's) own limits in a queue, overriding the queue's
    group defaults; saved to Redis (signals.py, features/groups.py)."""

    queue = models.ForeignKey(Queue, to_field="name", db_column="queue", on_delete=models.CASCADE,
                              related_name="groups")
    name = models.CharField(max_length=64, validators=[validate_group],
                            help_text="The group key requests name (1-64 characters, no '|').")
    concurrency = models.PositiveIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(MAX_CONCURRENCY)],
        help_text="At most this many of the group's items at once (0 = no limit); empty: the queue's default.")
    rate_limit = models.CharField(max_length=32, blank=True, default="", validators=[validate_rate_limit],
                                  help_text="20/s, 600/min...; empty: the queue's default.")

    class Meta:
        ordering = ["queue", "name"]
        constraints = [models.UniqueConstraint(fields=["queue", "name"], name="queue_group_unique")]

    def __str__(self):
        return f"{self.queue_id}/{self.name}"


class RequestRecord(models.Model):
    """A request's summary, kept after Redis cleans the request up."""

    STATES = [(s, s) for s in ("scheduled", "queued", "running", "completed", "failed", "cancelled", "expired")]

    id = models.CharField(primary_key=True, max_length=32)
    queue = models.CharField(max_length=64, db_index=True)
    processor = models.CharField(max_length=100, db_index=True)
    state = models.CharField(max_length=16, choices=STATES, db_index=True)
    priority = models.PositiveSmallIntegerField(db_index=True)
    concurrency = models.PositiveIntegerField()
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    expired = models.PositiveIntegerField(default=0)
    dedup_key = models.CharField(max_length=200, blank=True, db_index=True)
    items_preview = models.TextField(blank=True, help_text="The first items, for search.")
    created_at = models.DateTimeField(db_index=True)
    not_before = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["-created_at"]
        # pruning by age per state (core/retention.py: manage.py queue_prune and the workers' upkeep)
        indexes = [models.Index(fields=["state", "finished_at"], name="queueadmin_hist_state_fin")]

    def __str__(self):
        return f"{self.id} ({self.queue}/{self.processor}, {self.state})"


class ApiToken(models.Model):
    """A bearer token for the JSON API; only its hash is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=8, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Space-separated names from queueadmin.core.scopes.SCOPES; tokens from before scopes got "read submit steer".
    scopes = models.CharField(max_length=64, help_text="What the token may do (see core.auth.SCOPES).")
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Refused from then on (empty: never expires).")
    revoked_at = models.DateTimeField(null=True, blank=True, help_text="Refused from then on.")
    # Signs the webhooks of requests this token submits (core/webhooks/policy.py); shown once, with the key.
    # Empty for tokens issued before webhooks: they cannot ask for one.
    webhook_secret = models.CharField(max_length=64, blank=True, editable=False)

    def __str__(self):
        return f"{self.prefix}… ({self.user})"

    @staticmethod
    def hash(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    @classmethod
    def issue(cls, user, name: str = "", scopes=None, expires_at=None) -> tuple["ApiToken", str]:
        """Create a token; the plain key is returned once and never stored.
        No permission check here: callers apply core.scopes.grant_error first."""
        scopes = parse_scopes(DEFAULT_SCOPES if scopes is None else scopes)
        key = "qa_" + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, key_hash=cls.hash(key), prefix=key[:8],
                                   scopes=" ".join(scopes), expires_at=expires_at,
                                   webhook_secret="whsec_" + secrets.token_urlsafe(32))
        return token, key

    @property
    def scopes_list(self) -> list[str]:
        return self.scopes.split()

    @property
    def scope_set(self) -> frozenset[str]:
        return frozenset(self.scopes.split())

    def usable(self, now=None) -> bool:
        """Neither revoked nor expired (the user's state is checked by core.auth)."""
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    def allows(self, scope: str) -> bool:
        """Carries `scope` and its user still holds the permission behind it."""
        return allows(self, scope)


class PeriodicRequest(models.Model):
    """A request submitted again at each due time (a cron expression or a fixed
    interval). Saving publishes it to Redis, where workers fire it
    (core/periodic.py, core/engine/features/periodic.py); last and next run are
    copied back from Redis when the Scheduled page or the admin list is shown."""

    CATCH_UP = [("once", "once: one request for all missed times"), ("skip", "skip: none for missed times")]

    name = models.CharField(max_length=64, unique=True,
                            validators=[RegexValidator(r"^[A-Za-z0-9._-]+$", "letters, digits, '.', '_' or '-'")])
    queue = models.ForeignKey(Queue, to_field="name", db_column="queue", on_delete=models.PROTECT,
                              related_name="periodic_requests")
    processor = models.CharField(max_length=100)
    items = models.TextField(help_text="One item per line (each line a JSON value if 'items are JSON').")
    items_are_json = models.BooleanField(default=False)
    priority = models.PositiveSmallIntegerField(null=True, blank=True, validators=[MaxValueValidator(99)],
                                                help_text="0-99; empty: the queue's default.")
    concurrency = models.PositiveIntegerField(null=True, blank=True,
                                              validators=[MinValueValidator(1), MaxValueValidator(MAX_CONCURRENCY)],
                                              help_text="Empty: the queue's default.")
    time_limit_seconds = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)],
                                           help_text="Per item (0 = none); empty: the queue's.")
    group = models.CharField(max_length=64, blank=True, default="", validators=[validate_group],
                             help_text="The group (tenant) its requests count against; empty: none.")
    cron = models.CharField(max_length=100, blank=True,
                            help_text="e.g. '0 3 * * *' (03:00 daily), 6 fields for seconds ('*/10 * * * * *').")
    interval_seconds = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)],
                                                   help_text="Instead of cron: every N seconds, counted from the "
                                                             "Unix epoch (60 fires on the minute).")
    timezone = models.CharField(max_length=64, default="UTC", help_text="The cron expression's time zone.")
    enabled = models.BooleanField(default=True)
    catch_up = models.CharField(max_length=8, choices=CATCH_UP, default="once",
                                help_text="After downtime with no worker running.")
    last_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_request_id = models.CharField(max_length=32, blank=True, editable=False)
    next_run_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def item_list(self) -> list:
        """The items as submitted; ValueError names a line that is not JSON."""
        lines = [line for line in (raw.rstrip("\r") for raw in self.items.split("\n")) if line.strip()]
        if not self.items_are_json:
            return lines
        out = []
        for n, line in enumerate(lines, 1):
            try:
                out.append(json.loads(line))
            except ValueError as exc:
                raise ValueError(f"line {n} is not JSON: {exc}") from None
        return out

    def to_definition(self) -> Definition:
        return Definition(name=self.name, queue=self.queue_id, processor=self.processor, items=self.item_list(),
                          priority=self.priority, concurrency=self.concurrency,
                          time_limit=self.time_limit_seconds, group=self.group, cron=self.cron.strip(),
                          interval=self.interval_seconds or 0, tz=self.timezone, catch_up=self.catch_up)
