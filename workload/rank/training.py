"""A training step beside the saves: what a checkpoint costs the job that takes it.

The step is CPU matrix work, one ``(N, N)`` float32 product per step, run in the rank's own
process on torch's intra-op threads, as a training step's compute would be. After the timed
samples (``train_every`` = K set), each rank runs:

1. a few untimed steps (and, with ``train_step_ms``, the search for the matrix side that takes
   that long);
2. baseline steps with no checkpoint anywhere: the step time without checkpointing;
3. ``sample_count`` checkpoint intervals, as DCP's async tutorial's loop runs them: wait for the
   previous save to be durable (the *wait*), save (the *stall*: the call until it returns), then
   K steps, each timed and marked *in flight* when the save's upload had not finished when the
   step began.

Per interval, overhead = (wait + stall + extra step time) / (K x baseline step time), with extra
step time = sum over the interval's steps of (step - baseline median), at least 0 in all. A sync
save's stall is the whole save; nothing is in flight during its steps.

On a CPU node the upload competes with the step for cores: the step uses torch's intra-op
threads (``step_threads``), the upload DCP's writer thread plus the backend's transfer threads (in
the rank's process for ``thread``, in the checkpointer process for ``process``), all on the
rank's ``cpus``: both numbers are recorded.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results.rank import OpStats, TrainTiming
from ckptbench.workload.contract.settings import TRAIN_MATRIX_MIN, TRAIN_TARGET_MATRIX_MAX

WARM_STEPS = 3
MIN_BASELINE_STEPS = 20
MAX_BASELINE_STEPS = 200
_SEARCH_ROUNDS = 6


class Step:
    """One training step: ``out = a @ b`` on (N, N) float32 matrices made once."""

    def __init__(self, matrix: int, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.matrix = matrix
        self.a = torch.rand(matrix, matrix, generator=generator)
        self.b = torch.rand(matrix, matrix, generator=generator)
        self.out = torch.empty(matrix, matrix)

    def __call__(self) -> float:
        t0 = time.perf_counter()
        torch.mm(self.a, self.b, out=self.out)
        return time.perf_counter() - t0


def step_seconds(side: int, seed: int = 0) -> float:
    """A step's time at matrix side ``side`` here: the median of three, after a first touch."""
    step = Step(side, seed)
    step()  # first touch
    return statistics.median(step() for _ in range(3))


def matrix_for(
    target_seconds: float, seed: int = 0, timed: Callable[[int], float] | None = None
) -> int:
    """The matrix side whose step takes about ``target_seconds`` here (work grows as N^3).
    ``timed`` gives a step's seconds at a side (default: :func:`step_seconds`, measured)."""
    took_at = timed if timed is not None else lambda side: step_seconds(side, seed)
    side = 256
    for _ in range(_SEARCH_ROUNDS):
        took = took_at(side)
        scaled = int(side * (target_seconds / max(took, 1e-6)) ** (1 / 3))
        side = max(TRAIN_MATRIX_MIN, min(TRAIN_TARGET_MATRIX_MAX, scaled))
    return side


def baseline_steps(every: int) -> int:
    """How many baseline steps: K, within bounds that keep the median steady and the run short."""
    return max(MIN_BASELINE_STEPS, min(MAX_BASELINE_STEPS, every))


@dataclass
class Interval:
    """One checkpoint interval on this rank."""

    wait: float  # for the previous save to be durable, before this one starts
    stall: float
    steps: list[float] = field(default_factory=list)
    in_flight: list[bool] = field(default_factory=list)

    def overhead(self, baseline: float) -> float:
        extra = sum(max(0.0, s - baseline) for s in self.steps)
        return (self.wait + self.stall + extra) / (len(self.steps) * baseline)


@dataclass
class Record:
    """What a rank's training phase measured."""

    matrix: int
    baseline: list[float] = field(default_factory=list)
    intervals: list[Interval] = field(default_factory=list)

    def timing(self, every: int) -> TrainTiming:
        base = statistics.median(self.baseline)
        flying = [s for i in self.intervals for s, f in zip(i.steps, i.in_flight, strict=True) if f]
        return TrainTiming(
            every=every,
            matrix=self.matrix,
            step_threads=torch.get_num_threads(),
            cpus=len(os.sched_getaffinity(0)),
            step=OpStats.of(self.baseline),
            in_flight_step=OpStats.of(flying) if flying else None,
            in_flight_steps=len(flying),
            wait=OpStats.of([i.wait for i in self.intervals]),
            stall=OpStats.of([i.stall for i in self.intervals]),
            overhead=OpStats.of([i.overhead(base) for i in self.intervals]),
        )


def matrix_of(config: WorkloadConfig) -> int:
    if config.train_step_ms is not None:
        return matrix_for(config.train_step_ms / 1000, config.seed)
    return config.train_matrix
