from django.apps import AppConfig


class QueueadminConfig(AppConfig):
    """The app a project installs as ``"queueadmin"`` (queueadmin/apps.py
    points here). Its label is ``queueadmin``, so it sits beside a project's
    own ``core`` app: tables ``queueadmin_*``, permissions ``queueadmin.*``."""

    name = "queueadmin.core"
    label = "queueadmin"
    verbose_name = "Queue administration"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import checks, signals, tasks  # noqa: F401  (model signals, system checks, the task resolver)
        from .catalog import autodiscover
        from .launch import show_logs

        show_logs()  # queueadmin's own log lines show in a project whose LOGGING says nothing of them

        autodiscover()  # installed apps' processors.py: the web process and workers see the same set
