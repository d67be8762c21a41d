"""Push queue configuration to Redis whenever it changes in the database."""
from django.db.models.signals import post_save
from django.dispatch import receiver

from queueadmin.core import clients
from queueadmin.core.models import Queue


@receiver(post_save, sender=Queue)
def push_queue_config(sender, instance, **kwargs):
    clients.engine().define_queue(instance.name, instance.to_config())
