"""Both demands at once: the interleaved windows a rank runs and what each measured
(contract/results/both.py says what the figures mean).

Each window: meet the other ranks; open the loader if the window reads (its workers start, and
one batch is taken untimed, so that starting them is no window's cost); start the save if the
window saves (its stall is the call until it returned), or, in a loader-alone window, wait as long
as the last together window's save call held its steps (its workers then fill their prefetch queue
for as long as a together window's did: without it, a together window's first batches would come
from a queue the save call let fill, and reading beside a save would look faster than alone);
``every`` steps, each taking its batch (when the window reads) and computing; wait until the save
is durable; close the loader (its workers stop: a closed loader reads nothing). A save-alone
window therefore saves with no worker reading, and a together window's loader reads from before
its save starts until it is durable.

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
    def idle(self, seconds: float) -> None:
        """Wait, touching nothing (the loader's workers go on fetching)."""
        ...


@dataclass(frozen=True)
class Measured:
    """One window's figures (None where the window does not read, or does not save)."""

    window: Window
    samples: int = 0
    step_seconds: float | None = None
    au: float | None = None
    stall: float | None = None
    save: float | None = None
    held: float = 0.0  # from the save call (or the idle) until the first timed step


def run_window(window: Window, every: int, side: Side, head_start: float = 0.0) -> Measured:
    """One window. ``head_start``: in a loader-alone window, how long the last together window's
    save call held the step before its first timed batch, waited here untimed, so that the
    workers of both kinds of window have had the same time to fill their prefetch queue."""
    side.meet()
    if window.reads:
        side.open_loader()
        side.batch()  # untimed: the workers' start is no window's cost
    save: Save | None = None
    stall: float | None = None
    called = side.clock()
    if window.saves:
        save = side.start_save()
        stall = save.stall
    elif window.reads:
        side.idle(head_start)
    held = side.clock() - called
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
        return Measured(window, samples, seconds / every, au, stall, saved, held)
    return Measured(window, stall=stall, save=saved, held=held)


def run(cycles: int, every: int, side: Side) -> list[Measured]:
    """Every window of the run, in :func:`~ckptbench.workload.contract.results.both.schedule`'s
    order, each loader-alone window given the last together window's head start."""
    out: list[Measured] = []
    head_start = 0.0
    for window in schedule(cycles):
        measured = run_window(window, every, side, head_start)
        if window is Window.TOGETHER:
            head_start = measured.held
        out.append(measured)
    return out


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
