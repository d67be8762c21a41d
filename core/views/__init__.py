"""The staff dashboard: one module per page, all reading through core.queries
and changing things through core.operations."""
