"""Processors by decorator, found by autodiscovery."""
import asyncio

from queueadmin.core.catalog import processor


@processor("taskapp.double")
def double(item):
    return item * 2


@processor
def triple(item, ctx):
    return {"value": item * 3, "attempt": ctx.attempt}


@processor("taskapp.async_double")
async def async_double(item):
    await asyncio.sleep(0.01)
    return item * 2
