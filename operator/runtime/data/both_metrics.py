"""A CheckpointBenchmark's series of both demands at once (``dataLoading`` set): each training
step reads a batch through the data loader while checkpoints are saved (docs/data-loading.md).

Labels namespace, name, backend, as the benchmark's other series (:mod:`..metrics`, which sets
these with them, so a deleted benchmark's, or a status without ``both``, leaves none). Every
value is ``status.both``'s, which the workload's ``workload/contract/results/both.py`` computed:
nothing is computed here. An interval is a ``statistic`` label, ``value``, ``ci_low`` and
``ci_high``, as the DataLoadingBenchmark's series have it (:mod:`.metrics`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import Gauge

from ckptbench.operator.runtime.series import REGISTRY, StatusPath, Value, at

_LABELS = ("namespace", "name", "backend")
WINDOWS = ("alone", "together")

SLOWDOWN = Gauge(
    "ckptbench_both_slowdown_ratio",
    "Both demands at once: a side's mean over windows together over its mean alone, the rank's "
    "with the largest ratio; side loader (the step), save (to durable) or stall; statistic value "
    "or its 95% interval's ci_low and ci_high (ci_high absent: unbounded above; both absent: "
    "fewer than 2 windows a side).",
    (*_LABELS, "side", "statistic"),
    registry=REGISTRY,
)
SAMPLES_PER_SECOND = Gauge(
    "ckptbench_both_samples_per_second",
    "Both demands at once: all ranks' samples over their seconds, in the loader-alone or the "
    "together windows.",
    (*_LABELS, "window"),
    registry=REGISTRY,
)
AU = Gauge(
    "ckptbench_both_accelerator_utilization_ratio",
    "Both demands at once: accelerator utilisation, the mean over ranks of each rank's mean "
    "window AU, in the loader-alone or the together windows.",
    (*_LABELS, "window"),
    registry=REGISTRY,
)
SECONDS = Gauge(
    "ckptbench_both_seconds",
    "Both demands at once: the mean over ranks of each rank's mean save (to durable) or stall, "
    "in the save-alone or the together windows (the loader reading).",
    (*_LABELS, "figure", "window"),
    registry=REGISTRY,
)
GAUGES = (SLOWDOWN, SAMPLES_PER_SECOND, AU, SECONDS)

SIDES = {"loader": "loaderSlowdown", "save": "saveSlowdown", "stall": "stallSlowdown"}
BOUNDS: dict[str, StatusPath] = {
    "value": ("ratio",),
    "ci_low": ("interval", "low"),
    "ci_high": ("interval", "high"),
}
# Each family's series: (its labels after the benchmark's) -> the keys in status.both.
FIGURES: dict[Gauge, dict[tuple[str, ...], StatusPath]] = {
    SLOWDOWN: {
        (side, statistic): (key, *path)
        for side, key in SIDES.items()
        for statistic, path in BOUNDS.items()
    },
    SAMPLES_PER_SECOND: {(w,): (f"samplesPerSecond{w.title()}",) for w in WINDOWS},
    AU: {(w,): (f"au{w.title()}",) for w in WINDOWS},
    SECONDS: {(f, w): (f"{f}Seconds{w.title()}",) for f in ("save", "stall") for w in WINDOWS},
}


def values(base: tuple[str, ...], status: Mapping[str, Any]) -> list[Value]:
    """The series of ``status.both`` under the benchmark's labels ``base``; none without it."""
    both = status.get("both")
    if not isinstance(both, Mapping):
        return []
    return [
        (gauge, (*base, *labels), value)
        for gauge, paths in FIGURES.items()
        for labels, path in paths.items()
        if (value := at(both, path)) is not None
    ]
