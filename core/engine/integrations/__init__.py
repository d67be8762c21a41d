"""Integrations with other tools, built on the engine's hooks (hooks.py):
`otel` (OpenTelemetry tracing) and `sentry`. Each imports its tool only when
it is installed, and nothing here is imported unless asked for."""
