"""Push queue configuration to Redis whenever it changes in the database."""
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from queueadmin.core import clients
from queueadmin.core.engine.features import ratelimit
from queueadmin.core.models import Queue, QueueGroup


@receiver(post_save, sender=Queue)
def push_queue_config(sender, instance, **kwargs):
    clients.engine().define_queue(instance.name, instance.to_config())


def push_group_limits(group: QueueGroup) -> None:
    clients.engine().set_group_limits(group.queue_id, group.name, group.concurrency,
                                      ratelimit.canonical(group.rate_limit) or None)


@receiver(post_save, sender=QueueGroup)
def push_queue_group(sender, instance, **kwargs):
    push_group_limits(instance)


@receiver(post_delete, sender=QueueGroup)
def clear_queue_group(sender, instance, **kwargs):
    clients.engine().clear_group_limits(instance.queue_id, instance.name)
