"""Progress of a local run: which cell of how many, and for long cells the sample and an ETA.

The ranks already print a line per operation; rank 0's load line ends each sample (warm-up or
timed), so counting those lines gives samples done without a second channel from the ranks. The
pattern below is the one :mod:`ckptbench.workload.rank.loop` prints (``[rank 0] load 2/3: ...``,
``[rank 0] load warm-up 1/1: ...``); the end-to-end test of a local sweep checks they still meet.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import IO

from ckptbench.workload.contract.config import WorkloadConfig

SAMPLE_DONE = re.compile(r"^\[rank 0\] load (?:warm-up )?\d+/\d+:")
# ckptbench data's: rank 0 ends each epoch of its first accelerator with this line
# (ckptbench.workload.rank.data.procedure).
EPOCH_DONE = re.compile(r"^\[rank 0\] epoch \d+/\d+:")
# Below this a cell is short enough that a line per sample is noise beside the ranks' own lines.
QUIET_SECONDS = 10.0


def fmt_duration(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Says ``cell i/N`` as each cell starts and, once a cell is long, ``sample k/n, ETA``."""

    def __init__(
        self,
        cells: int,
        out: IO[str],
        clock: Callable[[], float] = time.monotonic,
        quiet_seconds: float = QUIET_SECONDS,
        done: re.Pattern[str] = SAMPLE_DONE,
        step: str = "sample",
    ) -> None:
        self.cells = cells
        self.done_pattern, self.step = done, step
        self.out = out
        self.clock = clock
        self.quiet_seconds = quiet_seconds
        self._lock = threading.Lock()
        self._index = 0
        self._label = ""
        self._total_samples = 0
        self._done = 0
        self._cell_started = 0.0
        self._first_done: float | None = None
        self._finished_cells: list[float] = []  # seconds each finished cell took

    def start_cell(self, index: int, label: str, config: WorkloadConfig) -> str:
        """Begin cell ``index`` (0-based); returns its prefix ``cell i/N`` (empty for one cell)."""
        return self.start(index, label, config.warmups + config.samples)

    def start(self, index: int, label: str, steps: int) -> str:
        """Begin cell ``index`` of ``steps`` steps (samples, epochs); returns its prefix."""
        with self._lock:
            self._index = index
            self._label = label
            self._total_samples = steps
            self._done = 0
            self._cell_started = self.clock()
            self._first_done = None
        return self.prefix(index)

    def prefix(self, index: int) -> str:
        return f"cell {index + 1}/{self.cells} " if self.cells > 1 else ""

    def end_cell(self) -> None:
        with self._lock:
            self._finished_cells.append(self.clock() - self._cell_started)

    def line(self, rank: int, text: str) -> None:
        """A line a rank printed (called from the runner's reader threads)."""
        if not self.done_pattern.match(text):  # rank 0's lines only: every rank runs every step
            return
        with self._lock:
            now = self.clock()
            self._done += 1
            if self._first_done is None:
                self._first_done = now
            message = self._message(now)
        if message:
            self.out.write(message + "\n")
            self.out.flush()

    def _message(self, now: float) -> str | None:
        elapsed = now - self._cell_started
        if elapsed < self.quiet_seconds:
            return None
        left = self._total_samples - self._done
        first = self._first_done if self._first_done is not None else now
        # From the first sample's end: the start-up (ranks, state build) does not repeat.
        per_sample = (now - first) / (self._done - 1) if self._done >= 2 else elapsed
        eta = per_sample * left
        text = (
            f"{self.prefix(self._index)}{self._label}: {self.step} {self._done}/"
            f"{self._total_samples} "
            f"done, {fmt_duration(elapsed)} in, ETA {fmt_duration(eta)}"
        )
        cells_left = self.cells - self._index - 1
        if cells_left > 0 and self._finished_cells:
            mean_cell = sum(self._finished_cells) / len(self._finished_cells)
            text += f" (all cells: ~{fmt_duration(eta + cells_left * mean_cell)})"
        return text
