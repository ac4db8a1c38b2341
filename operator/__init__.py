"""The kopf operator: spec model, rendering, status, metrics and thin handlers."""
