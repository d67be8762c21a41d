"""Processors the system check must refuse (referenced by path in tests only)."""


def generate(item):
    yield item


not_callable = 42
