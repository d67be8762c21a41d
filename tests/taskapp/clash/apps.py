from django.apps import AppConfig


class ClashConfig(AppConfig):
    name = "tests.taskapp.clash"
    label = "taskapp_clash"
