from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Queue administration"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import checks, signals, tasks  # noqa: F401  (model signals, system checks, the task resolver)
        from .catalog import autodiscover

        autodiscover()  # installed apps' processors.py: the web process and workers see the same set
