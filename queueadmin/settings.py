"""Django settings for queueadmin.

Everything that differs between machines comes from the environment (read
with django-environ; docs/configuration.md lists every
variable): REDIS_URL (the run script starts an embedded redis-server and sets
it when it is unset), DATABASE_URL / DATABASE_PATH, DJANGO_SECRET_KEY,
DJANGO_DEBUG, and the production switches DJANGO_SECURE, DJANGO_ALLOWED_HOSTS,
DJANGO_CSRF_TRUSTED_ORIGINS, DJANGO_SECURE_PROXY_SSL_HEADER.

Secure by default: DEBUG is off unless DJANGO_DEBUG=1, and without
DJANGO_SECRET_KEY a key is generated once into the data folder (mode 0600).
"""
import json
import os
import secrets
from datetime import timedelta
from pathlib import Path

import environ  # django-environ

env = environ.Env()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("QUEUEADMIN_VAR", BASE_DIR / "var"))


# Secrets made on this machine because the environment gave none: `manage.py
# check` warns when the database is shared by several machines (queueadmin.core.checks).
QUEUEADMIN_GENERATED_SECRETS = []


def _secret_key(path: Path, var: str = "DJANGO_SECRET_KEY") -> str:
    """The variable `var`, else the key in `path` (VAR_DIR/...), made on first start.
    Written to a private temp file and linked into place, so processes starting
    together never read a half-written key and all end up with the same one."""
    key = env.str(var, default="")
    if key:
        return key
    QUEUEADMIN_GENERATED_SECRETS.append("SECRET_KEY" if var == "DJANGO_SECRET_KEY" else "WEBHOOK_SECRET")
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # private, whatever the umask
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(50) + "\n")
        try:
            os.link(tmp, path)  # fails if another process was first: use theirs
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


SECRET_KEY = _secret_key(VAR_DIR / "secret_key")
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

# -- production: behind an HTTPS proxy (docs/operations.md "Production behind HTTPS") --
# DJANGO_SECURE=1 turns on secure cookies, the HTTPS redirect and HSTS; each can
# be overridden on its own. DJANGO_SECURE_PROXY_SSL_HEADER names the header by
# which the proxy says the request came over HTTPS (e.g. X-Forwarded-Proto,
# value "https"); only set it when the proxy always sets or strips that header.
SECURE = env.bool("DJANGO_SECURE", default=False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=SECURE)
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=SECURE)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]  # probes on plain HTTP carry no secret
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=365 * 86400 if SECURE else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=SECURE)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=SECURE)
if env.str("DJANGO_SECURE_PROXY_SSL_HEADER", default=""):
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + env.str("DJANGO_SECURE_PROXY_SSL_HEADER").upper().replace("-", "_"), "https")
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    # no "daphne" app: it imports Twisted into every command; uvicorn serves the dashboard (bin/run)
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "channels",
    "axes",
    "queueadmin",
]
# Django Tasks: the `django-tasks` backport before Django 6 (built in from 6.0),
# and more apps from QUEUEADMIN_EXTRA_APPS (comma-separated; apps with tasks.py
# or processors.py, e.g. the tests' example app in worker processes).
import django  # noqa: E402

if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")
INSTALLED_APPS += [a.strip() for a in os.environ.get("QUEUEADMIN_EXTRA_APPS", "").split(",") if a.strip()]
TASKS = {
    "default": {
        "BACKEND": "queueadmin.tasks.QueueadminBackend",
        "QUEUES": [],  # any queue defined in the admin
        # True: an enqueue inside a transaction is submitted when it commits (dropped on rollback)
        "ENQUEUE_ON_COMMIT": env.bool("QUEUEADMIN_TASKS_ON_COMMIT", default=False),
    }
}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "queueadmin.core.middleware.RedisTroubleMiddleware",  # Redis down or full: a 503 page, not a 500
    "axes.middleware.AxesMiddleware",  # last: turns a locked-out login into the lockout page
]

ROOT_URLCONF = "queueadmin.root_urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # the standalone service's own pages (login, error pages); the app's are found by APP_DIRS
        "DIRS": [Path(__file__).resolve().parent / "templates"],
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

# DATABASE_URL (postgres://user:pass@host:5432/db, psycopg 3) selects the
# database, which web and workers on several machines then share; without it,
# the embedded SQLite file DATABASE_PATH (one machine).
if env.str("DATABASE_URL", default=""):
    _db = env.db_url("DATABASE_URL")
else:
    _db = {"ENGINE": "django.db.backends.sqlite3", "NAME": env.str("DATABASE_PATH", default=str(VAR_DIR / "db.sqlite3"))}
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE: several worker processes write history; take the write lock up front.
    # synchronous=NORMAL: with WAL, a commit no longer waits for an fsync (it was most
    # of a worker's cost of recording a finished request); the file stays consistent
    # after any crash, and a power cut can lose only the last commits (SQLite's docs).
    _db["OPTIONS"] = {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                      "transaction_mode": "IMMEDIATE", **_db.get("OPTIONS", {})}
else:
    # 0: a connection per request (ASGI); workers keep theirs and drop it when it breaks
    _db["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=0)
    _db["CONN_HEALTH_CHECKS"] = True
DATABASES = {"default": _db}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login throttling (django-axes): after QUEUEADMIN_LOGIN_FAILURES failed logins
# for one username from one address, that pair is refused for
# QUEUEADMIN_LOGIN_COOLOFF_MINUTES (`manage.py axes_reset_username NAME` lifts it).
# The address is the connection's (REMOTE_ADDR): behind a reverse proxy, run
# the service with QUEUEADMIN_FORWARDED_ALLOW_IPS (uvicorn's --proxy-headers)
# so that it is the client's, not the proxy's (docs/operations.md).
AUTHENTICATION_BACKENDS = [
    "queueadmin.core.login_backend.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("QUEUEADMIN_LOGIN_FAILURES", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.float("QUEUEADMIN_LOGIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = []  # the app's own static files are found in it (core/static)
# htmx and its WebSocket extension: in the wheel they are the app's static
# files; in a checkout bin/frontend installs them from npm into var/frontend,
# served as static/queueadmin/vendor/... (no CDN, nothing vendored in git).
FRONTEND_DIR = VAR_DIR / "frontend" / "dist"
if FRONTEND_DIR.exists():
    STATICFILES_DIRS.append(("queueadmin/vendor", FRONTEND_DIR))
# WhiteNoise serves static files without DEBUG (uvicorn serves none). It finds
# them where they are (static/, the npm folder, the apps), so no collectstatic
# step: a few dozen files, indexed once at start.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
try:  # WhiteNoise also serves STATIC_ROOT (for those who run collectstatic) and warns when it is missing
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
except OSError:
    pass

# Content-Security-Policy (django-csp): everything from this origin, nothing
# inline (no inline scripts, handlers or styles; htmx's indicator styles are
# off, see base.html), WebSockets back to this origin, no framing.
from csp.constants import NONE, SELF  # noqa: E402

CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

# Messages live in the session (the database), not in a cookie the browser can read.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"

CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# QUEUEADMIN_LOG_FORMAT=json: one JSON object per line (core/logs.py) from the
# workers, Django and the web server (uvicorn's own loggers are taken over too);
# plain text by default.
from queueadmin.core.logs import log_format  # noqa: E402

LOG_FORMAT = log_format()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
                   "json": {"()": "queueadmin.core.logs.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "loggers": {"queueadmin": {"handlers": ["console"], "level": os.environ.get("QUEUEADMIN_LOG_LEVEL", "INFO")},
                # a 500's traceback (Django sends it only to mail_admins without DEBUG)
                "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False}},
}
if LOG_FORMAT == "json":
    for _name in ("django", "django.request", "django_tasks", "uvicorn", "uvicorn.access", "daphne"):
        LOGGING["loggers"][_name] = {"handlers": ["console"], "level": "INFO", "propagate": False}

# The queue engine. Processors are dotted paths to callables `payload -> result`.
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6390/0")
# A Redis Cluster: REDIS_URL=redis+cluster://host:port[,host:port...], or a
# redis:// URL of one node with REDIS_CLUSTER=1 (see docs/keys.md).
REDIS_CLUSTER = os.environ.get("REDIS_CLUSTER", "").lower() in ("1", "true", "yes")
# queueadmin's own settings: each has a default (queueadmin/core/conf.py,
# docs/configuration.md); this service sets from the environment those an
# operator changes most, so a deployment needs no settings file of its own.
_ENV_SETTINGS = {  # QUEUEADMIN key -> (environment variable, type)
    "PREFIX": ("QUEUEADMIN_PREFIX", str),
    "AGING_SECONDS": ("QUEUEADMIN_AGING_SECONDS", float),
    "HEARTBEAT_SECONDS": ("QUEUEADMIN_HEARTBEAT_SECONDS", float),
    "DEAD_AFTER_SECONDS": ("QUEUEADMIN_DEAD_AFTER_SECONDS", float),
    "WAIT_REPLICAS": ("QUEUEADMIN_WAIT_REPLICAS", int),
    "WAIT_TIMEOUT_MS": ("QUEUEADMIN_WAIT_TIMEOUT_MS", int),
    "API_MAX_BODY_BYTES": ("QUEUEADMIN_API_MAX_BODY_BYTES", int),
    "API_ANON_MAX_BODY_BYTES": ("QUEUEADMIN_API_ANON_MAX_BODY_BYTES", int),
    "API_BODY_BUDGET_BYTES": ("QUEUEADMIN_API_BODY_BUDGET_BYTES", int),
    "API_MAX_ITEMS": ("QUEUEADMIN_API_MAX_ITEMS", int),
    "API_MAX_ITEM_BYTES": ("QUEUEADMIN_API_MAX_ITEM_BYTES", int),
    "API_RATE_LIMIT": ("QUEUEADMIN_API_RATE_LIMIT", str),
    "METRICS_TOKEN": ("QUEUEADMIN_METRICS_TOKEN", str),
    "WEBHOOK_BACKOFF_SECONDS": ("QUEUEADMIN_WEBHOOK_BACKOFF_SECONDS", float),
}
QUEUEADMIN = {key: cast(os.environ[var]) for key, (var, cast) in _ENV_SETTINGS.items() if os.environ.get(var)}
QUEUEADMIN["WEBHOOK_ALLOWED_HOSTS"] = env.list("QUEUEADMIN_WEBHOOK_ALLOWED_HOSTS", default=[])
# The webhook signing secret must be the same on every machine: set QUEUEADMIN_WEBHOOK_SECRET
# there; on one machine it is generated once into the data folder.
QUEUEADMIN["WEBHOOK_SECRET"] = _secret_key(VAR_DIR / "webhook_secret", "QUEUEADMIN_WEBHOOK_SECRET")
# More processors, as JSON {"name": "dotted.path"} (tests and deployments add their own).
QUEUEADMIN["PROCESSORS"] = json.loads(os.environ.get("QUEUEADMIN_EXTRA_PROCESSORS", "{}"))
