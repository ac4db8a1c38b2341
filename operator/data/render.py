"""DataLoadingBenchmark -> JobSet, as a pure function of data (no kopf, no Kubernetes client).

The JobSet around the ranks is the CheckpointBenchmark's (``render/jobset.py``: one Indexed Job,
rank 0 at ``<name>-rank-0-0.<name>.<namespace>.svc``, restricted pods, the liveness probe, Kueue's
labels, the admin's policy checked once more); what differs is what the ranks run: ``ckptbench
data-worker`` with the data settings as ``CKPTBENCH_*`` variables (the DataConfig round trip,
``contract/environment.py``), and a memory limit from the data memory plan.
"""

from __future__ import annotations

from typing import Any

from ckptbench.operator.data.model import DataLoadingBenchmarkSpec
from ckptbench.operator.data.names import KIND, WORKER_COMMAND
from ckptbench.operator.data.rules import planned_bytes
from ckptbench.operator.render.jobset import (
    Ranks,
    RenderDefaults,
    build_jobset,
    check_renderable,
    spec_hash,
)
from ckptbench.operator.render.labels import LABEL_KIND, benchmark_labels, master_addr, run_id
from ckptbench.operator.render.liveness import HEARTBEAT_FILE
from ckptbench.operator.render.resources import container_resources, with_headroom
from ckptbench.workload.contract.data.config import DataConfig


def data_labels(name: str) -> dict[str, str]:
    """Labels on everything rendered for DataLoadingBenchmark ``name``: a benchmark's (the
    operator's pod watch selects by them) and the kind."""
    return {**benchmark_labels(name), LABEL_KIND: KIND}


def data_config(name: str, namespace: str, uid: str, spec: DataLoadingBenchmarkSpec) -> DataConfig:
    """What every rank of the benchmark runs with; each pod sets its own rank. Every rank beats
    its heartbeat where the pod's liveness probe reads it."""
    config = spec.to_data_config(run_id=run_id(name, uid), master_addr=master_addr(name, namespace))
    return config.model_copy(update={"heartbeat_file": HEARTBEAT_FILE})


def planned_limit_bytes(spec: DataLoadingBenchmarkSpec) -> int:
    """The memory limit of a rank whose spec gives none: its planned peak with headroom."""
    return with_headroom(planned_bytes(spec))


def render_data_jobset(
    name: str,
    namespace: str,
    uid: str,
    spec: DataLoadingBenchmarkSpec,
    defaults: RenderDefaults,
    *,
    owner: bool = True,
) -> dict[str, Any]:
    """The JobSet that runs DataLoadingBenchmark ``name``; ``owner=False`` leaves out the owner
    reference. Raises :class:`~ckptbench.operator.render.jobset.RenderError` naming the field."""
    image = check_renderable(name, namespace, uid, spec, defaults)
    config = data_config(name, namespace, uid, spec)
    ranks = Ranks(
        kind=KIND,
        count=config.rank_count,
        command=WORKER_COMMAND,
        env=config.to_env(),
        port=config.master_port,
        termination_log=config.termination_log,
        progress_timeout_seconds=config.progress_timeout_seconds,
        resources=container_resources(spec.resources, planned_limit_bytes(spec)),
        spec_hash=spec_hash(spec),
        labels=data_labels(name),
    )
    return build_jobset(name, namespace, uid, spec, image, defaults, ranks, owner=owner)
