"""Errors the engine raises for users."""


class QueueError(ValueError):
    """Bad input or an impossible action, with a message fit for a user."""
