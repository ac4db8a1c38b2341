"""The kopf operator, one room per concern.

- ``spec/``: the CheckpointBenchmark resource (names, pydantic spec model, CEL rules and their
  Python twins, the generated CRD);
- ``render/``: the pure CheckpointBenchmark -> JobSet rendering and ``ckptbench render``;
- ``status/``: the pure status (pods read, aggregates and bounds, phase and conditions);
- ``runtime/``: what talks to the cluster (kopf handlers, reconcile, API calls, metrics, main).

``spec``, ``render`` and ``status`` import no kopf, Kubernetes client or metrics library.
"""
