"""Push queue configuration to Redis whenever it changes in the database."""
from django.db.models.signals import post_save
from django.dispatch import receiver

from .models import Queue


@receiver(post_save, sender=Queue)
def push_queue_config(sender, instance, **kwargs):
    from .services import engine

    engine().define_queue(instance.name, instance.to_config())
