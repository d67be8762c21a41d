from django.apps import AppConfig

from queueadmin.core.catalog import autodiscover
from queueadmin.core.launch import show_logs


class QueueadminConfig(AppConfig):
    """The app a project installs as ``"queueadmin"`` (queueadmin/apps.py
    points here). Its label is ``queueadmin``, so it sits beside a project's
    own ``core`` app: tables ``queueadmin_*``, permissions ``queueadmin.*``."""

    name = "queueadmin.core"
    label = "queueadmin"
    verbose_name = "Queue administration"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # here, not at the top: these import the models, which are ready only now;
        # importing them registers the system checks, the model signals and the task resolver
        from queueadmin.core import checks, signals, tasks  # noqa: F401

        show_logs()  # queueadmin's own log lines show in a project whose LOGGING says nothing of them

        autodiscover()  # installed apps' processors.py: the web process and workers see the same set

        from queueadmin.core import conf
        from queueadmin.core.engine.integrations import otel, sentry

        otel.install_if_available(conf.get("OPENTELEMETRY"))  # tracing, when OpenTelemetry is installed
        # Sentry, when the project set sentry-sdk up: here for the web process too, whose cancels
        # close a periodic request's cron check-in (workers install it at launch as well)
        sentry.install_if_available(conf.get("SENTRY"))
