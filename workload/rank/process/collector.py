"""Python's garbage collector, run as the training job runs it, and its cost inside timings.

A checkpoint of a model makes and drops many small Python objects (DCP's plans, metadata and
read/write items, several per tensor). With automatic collection on, those allocations trigger
collections whose full (oldest-generation) passes walk every tracked object of the process,
including the hundreds of thousands torch's import leaves behind: on a rank of 1,500 tensors they
took more than half of DCP's planning time (docs/measurement.md). Large training jobs do not run
that way: torchtitan disables automatic collection and collects between steps, Megatron-LM
(``--manual-gc``) and NeMo (``gc_interval``) offer the same, to keep ranks free of collection
stragglers. ``manual`` reproduces that: automatic collection off for the rank's run, a full
collection before each timed operation, outside its timing. ``automatic`` keeps Python's default.

Either way, :meth:`Collector.timed` measures the seconds automatic collections took during an
operation (on any thread), so a result says how much of a duration was garbage collection.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ckptbench.workload.contract.choices import GarbageCollection


@dataclass
class GcCost:
    seconds: float = 0.0
    collections: int = 0


class Collector:
    """One rank's collector policy; :meth:`close` restores the process's previous setting."""

    def __init__(self, mode: GarbageCollection) -> None:
        self.mode = mode
        self._was_enabled = gc.isenabled()
        # Re-entrant: a collection may start on this thread while it holds the lock.
        self._lock = threading.RLock()
        self._started: dict[int, float] = {}  # collecting thread -> when its collection began
        self._seconds = 0.0
        self._collections = 0
        if mode is GarbageCollection.MANUAL:
            gc.disable()
        gc.callbacks.append(self._on_collection)

    def tidy(self) -> None:
        """Before a timed operation: in manual mode, the collection training would run between
        steps, so the operation starts with no garbage of earlier samples to walk."""
        if self.mode is GarbageCollection.MANUAL:
            gc.collect()

    @contextmanager
    def timed(self) -> Iterator[GcCost]:
        """Yields a cost that, on exit, holds the automatic collections run while the block ran
        and the seconds they took (our own :meth:`tidy` calls are never inside a block)."""
        with self._lock:
            seconds0, count0 = self._seconds, self._collections
        cost = GcCost()
        try:
            yield cost
        finally:
            with self._lock:
                cost.seconds = self._seconds - seconds0
                cost.collections = self._collections - count0

    def close(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        if self._was_enabled:
            gc.enable()

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        now = time.perf_counter()
        thread = threading.get_ident()
        with self._lock:
            if phase == "start":
                self._started[thread] = now
            elif thread in self._started:
                self._seconds += now - self._started.pop(thread)
                self._collections += 1
