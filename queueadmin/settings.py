"""Django settings for queueadmin.

Everything that differs between machines comes from the environment:
REDIS_URL (the run script starts an embedded redis-server and sets it when it
is unset), DATABASE_PATH, DJANGO_SECRET_KEY, DJANGO_DEBUG.
"""
import json
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("QUEUEADMIN_VAR", BASE_DIR / "var"))

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "dev-only-insecure-key-change-me-in-production")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "channels",
    "core",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "queueadmin.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
WSGI_APPLICATION = None
ASGI_APPLICATION = "queueadmin.asgi.application"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DATABASE_PATH", str(VAR_DIR / "db.sqlite3")),
        # IMMEDIATE: several worker processes write history; take the write lock up front.
        "OPTIONS": {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL;", "transaction_mode": "IMMEDIATE"},
    }
}

AUTH_PASSWORD_VALIDATORS = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").exists() else []
# htmx and its WebSocket extension, installed from npm by bin/frontend and
# served locally as static/vendor/... (no CDN, nothing vendored in git).
FRONTEND_DIR = VAR_DIR / "frontend" / "node_modules"
if FRONTEND_DIR.exists():
    STATICFILES_DIRS.append(("vendor", FRONTEND_DIR))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"queueadmin": {"handlers": ["console"], "level": os.environ.get("QUEUEADMIN_LOG_LEVEL", "INFO")}},
}

# The queue engine. Processors are dotted paths to callables `payload -> result`.
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6390/0")
# A Redis Cluster: REDIS_URL=redis+cluster://host:port[,host:port...], or a
# redis:// URL of one node with REDIS_CLUSTER=1 (see docs/KEYS.md).
REDIS_CLUSTER = os.environ.get("REDIS_CLUSTER", "").lower() in ("1", "true", "yes")
QUEUEADMIN = {
    "PREFIX": os.environ.get("QUEUEADMIN_PREFIX", "qa"),
    "PROCESSORS": {
        "echo": "core.engine.processors.echo",
        "uppercase": "core.engine.processors.uppercase",
        "word_count": "core.engine.processors.word_count",
        "sha256": "core.engine.processors.sha256",
        "sleep": "core.engine.processors.sleep",
        "fail": "core.engine.processors.fail",
    },
    # Lift a waiting request one priority level per this many seconds (None: off).
    "AGING_SECONDS": float(os.environ["QUEUEADMIN_AGING_SECONDS"]) if os.environ.get("QUEUEADMIN_AGING_SECONDS") else None,
    "HEARTBEAT_SECONDS": float(os.environ.get("QUEUEADMIN_HEARTBEAT_SECONDS", "1")),
    "DEAD_AFTER_SECONDS": float(os.environ.get("QUEUEADMIN_DEAD_AFTER_SECONDS", "10")),
    # Wait for this many replicas to have each write round trip (acks, submissions)
    # before going on: WAIT n timeout. 0 = off (Redis replicates asynchronously).
    "WAIT_REPLICAS": int(os.environ.get("QUEUEADMIN_WAIT_REPLICAS", "0")),
    "WAIT_TIMEOUT_MS": int(os.environ.get("QUEUEADMIN_WAIT_TIMEOUT_MS", "1000")),
}
# More processors, as JSON {"name": "dotted.path"} (tests and deployments add their own).
QUEUEADMIN["PROCESSORS"].update(json.loads(os.environ.get("QUEUEADMIN_EXTRA_PROCESSORS", "{}")))
