"""See inside a store: Prometheus metrics, OpenTelemetry spans, a health report, and
the seed's mathematics computed from recorded history (see ``docs/observability.md``).
"""
