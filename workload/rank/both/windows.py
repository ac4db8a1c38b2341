"""Both demands at once: the interleaved windows a rank runs and what each measured
(contract/results/both.py says what the figures mean).

Each window: meet the other ranks; open the loader if the window reads (its workers start, and
one batch is taken untimed, so that starting them is no window's cost); start the save if the
window saves (its stall is the call until it returned); ``every`` steps, each taking its batch
(when the window reads) and computing; wait until the save is durable; close the loader (its
workers stop: a closed loader reads nothing). A save-alone window therefore saves with no worker
reading, and a together window's loader reads from before its save starts until it is durable.

What the windows drive is a :class:`Side` and time is read from its ``clock``, so the order, the
state of the loader around each save and the figures are tested with a modelled clock
(tests/test_both_windows.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ckptbench.workload.contract.results.both import Window, schedule
from ckptbench.workload.contract.results.rank import BothTiming, OpStats


class Save(Protocol):
    """A started save: its stall (the save call until it returned, timed by the rank around the
    call alone: not the writer's setup nor our cleanup) and, once it is, how long from its call
    until it was durable."""

    @property
    def stall(self) -> float: ...
    def durable(self) -> float: ...


class Side(Protocol):
    """What a window needs from the rank."""

    def clock(self) -> float: ...
    def meet(self) -> None: ...
    def open_loader(self) -> None: ...
    def close_loader(self) -> None: ...
    def batch(self) -> tuple[int, float]:
        """The next batch: its samples and the seconds its check took (not training's)."""
        ...

    def compute(self) -> float:
        """The accelerator busy for one step; the seconds it was."""
        ...

    def start_save(self) -> Save: ...


@dataclass(frozen=True)
class Measured:
    """One window's figures (None where the window does not read, or does not save)."""

    window: Window
    samples: int = 0
    step_seconds: float | None = None
    au: float | None = None
    stall: float | None = None
    save: float | None = None


def run_window(window: Window, every: int, side: Side) -> Measured:
    side.meet()
    if window.reads:
        side.open_loader()
        side.batch()  # untimed: the workers' start is no window's cost
    save: Save | None = None
    stall: float | None = None
    if window.saves:
        save = side.start_save()
        stall = save.stall
    samples, checking, compute = 0, 0.0, 0.0
    start = side.clock()
    for _ in range(every):
        if window.reads:
            n, checked = side.batch()
            samples += n
            checking += checked
        compute += side.compute()
    seconds = side.clock() - start - checking
    saved = save.durable() if save is not None else None
    if window.reads:
        side.close_loader()
        au = compute / seconds if seconds > 0 else 0.0
        return Measured(window, samples, seconds / every, au, stall, saved)
    return Measured(window, stall=stall, save=saved)


def run(cycles: int, every: int, side: Side) -> list[Measured]:
    """Every window of the run, in :func:`~ckptbench.workload.contract.results.both.schedule`'s
    order."""
    return [run_window(w, every, side) for w in schedule(cycles)]


def timing(measured: list[Measured], every: int, cycles: int, compute: float) -> BothTiming:
    """A rank's windows as its bounded result."""

    def of(window: Window, figure: str) -> OpStats:
        values = [getattr(m, figure) for m in measured if m.window is window]
        return OpStats.of([v for v in values if v is not None])

    alone, together = Window.LOADER_ALONE, Window.TOGETHER
    return BothTiming(
        every=every,
        cycles=cycles,
        compute_seconds=compute,
        step_alone=of(alone, "step_seconds"),
        step_together=of(together, "step_seconds"),
        au_alone=of(alone, "au"),
        au_together=of(together, "au"),
        samples_alone=sum(m.samples for m in measured if m.window is alone),
        samples_together=sum(m.samples for m in measured if m.window is together),
        stall_alone=of(Window.SAVE_ALONE, "stall"),
        stall_together=of(together, "stall"),
        save_alone=of(Window.SAVE_ALONE, "save"),
        save_together=of(together, "save"),
    )
