"""Database side of queueadmin: queue configuration, request history, API tokens.

Redis holds the live queue; the database holds what must outlive it: the
settings edited in the admin and a summary of every request.
"""
import hashlib
import secrets

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from core.engine.config import MAX_CONCURRENCY, QueueConfig

_DEFAULTS = QueueConfig()


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

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def to_config(self) -> QueueConfig:
        return QueueConfig(priority=self.priority, concurrency=self.concurrency, lease_seconds=self.lease_seconds,
                           max_attempts=self.max_attempts, backoff_seconds=self.backoff_seconds,
                           backoff_max_seconds=self.backoff_max_seconds, retention_seconds=self.retention_seconds,
                           paused=self.paused)


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

    def __str__(self):
        return f"{self.prefix}… ({self.user})"

    @staticmethod
    def hash(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    @classmethod
    def issue(cls, user, name: str = "") -> tuple["ApiToken", str]:
        """Create a token; the plain key is returned once and never stored."""
        key = "qa_" + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, key_hash=cls.hash(key), prefix=key[:8])
        return token, key
