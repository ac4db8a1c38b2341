"""The running operator: kopf handlers, reconcile, Kubernetes API calls, metrics, ``main``."""
