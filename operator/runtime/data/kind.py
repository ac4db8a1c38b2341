"""The DataLoadingBenchmark as the reconciler sees it: its spec parsed, its JobSet rendered, its
status computed and its series set by the data kind's own functions; every step between is the
CheckpointBenchmark's (:func:`~ckptbench.operator.runtime.reconcile.reconcile_once`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from ckptbench.operator.data import names
from ckptbench.operator.data import status as data_status
from ckptbench.operator.data.model import DataLoadingBenchmarkSpec, parse_data_spec
from ckptbench.operator.data.render import render_data_jobset
from ckptbench.operator.render.jobset import spec_hash
from ckptbench.operator.runtime.data import metrics
from ckptbench.operator.runtime.reconcile import Kind

HANDLER_PREFIX = "data-"  # its reconciles are counted as data-create, data-pod, ...


def _compute(
    spec: DataLoadingBenchmarkSpec,
    jobset: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    previous: Mapping[str, Any] | None,
    now: datetime,
    *,
    generation: int | None,
    spec_change: str | None,
    foreign_jobset: str | None,
    memo: Any,
) -> BaseModel:
    return data_status.compute_status(
        spec,
        jobset,
        pods,
        previous,
        now,
        generation=generation,
        spec_hash=spec_hash(spec),
        spec_change=spec_change,
        foreign_jobset=foreign_jobset,
        memo=memo,
    )


DATA: Kind[DataLoadingBenchmarkSpec] = Kind(
    name=names.KIND,
    parse=parse_data_spec,
    render=render_data_jobset,
    compute=_compute,
    invalid=data_status.invalid_spec_status,
    backend=lambda spec: spec.backend.value,
    update_metrics=metrics.update_benchmark,
    remove_metrics=metrics.remove_benchmark,
    new_memo=data_status.DataMemo,
    handler_prefix=HANDLER_PREFIX,
)
