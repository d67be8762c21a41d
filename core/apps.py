from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Queue administration"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import signals  # noqa: F401  (connects model signals; no I/O here)
