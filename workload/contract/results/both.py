"""Both demands of training at once (``data_loading`` set): what a rank measured in its
interleaved windows, and each side's slowdown against running alone (docs/measurement.md, "Both
demands at once").

A rank runs ``train_every`` steps per window, in cycles of three windows in a fixed order
(:data:`ORDER`): a save with the loader off (*save alone*), a save with the loader reading
(*together*), the loader reading with no save (*loader alone*). So each side's alone and
together figures come from the same run, the same processes and interleaved time.

Per window, the data side's figures are taken over its steps (first batch asked to last batch
computed, the check of the samples left out): step seconds (window seconds / steps), samples per
second and accelerator utilisation (compute / window seconds). The checkpoint side's: the stall
(the save call until it returned; a sync save's is the whole save) and the save (the call until
durable). A slowdown is together / alone of the means over windows of a time figure, so above 1
is slower: the loader's is of step seconds (alone samples/s / together samples/s, the samples
per window being the same), the checkpoint's of save seconds and of stall seconds. Its interval is
:func:`~ckptbench.workload.contract.results.intervals.ratio_interval`'s: a 95% Student-t interval
of the ratio of two means over windows (delta method, Welch's degrees of freedom). Across ranks,
the slowest rank's slowdown (the largest) is what holds a job back, and is the one reported.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from ckptbench.workload.contract.results import intervals, stats
from ckptbench.workload.contract.results.rank import ROUND, BothTiming, OpStats
from ckptbench.workload.contract.results.summaries import BothSummary, Interval, Slowdown


class Window(enum.StrEnum):
    SAVE_ALONE = "save-alone"  # a save, the loader closed: its workers read nothing
    TOGETHER = "together"  # a save, the loader reading
    LOADER_ALONE = "loader-alone"  # the loader reading, no save anywhere

    @property
    def saves(self) -> bool:
        return self is not Window.LOADER_ALONE

    @property
    def reads(self) -> bool:
        return self is not Window.SAVE_ALONE


ORDER: tuple[Window, ...] = (Window.SAVE_ALONE, Window.TOGETHER, Window.LOADER_ALONE)


def schedule(cycles: int) -> list[Window]:
    """The windows of a run, interleaved: ``cycles`` times :data:`ORDER`."""
    return [w for _ in range(cycles) for w in ORDER]


def slowdown(alone: OpStats, together: OpStats) -> tuple[float, Interval | None]:
    """Together's mean over alone's, with its interval; 0 with no time alone."""
    if alone.mean <= 0:
        return 0.0, None
    ratio = round(together.mean / alone.mean, ROUND)
    return ratio, intervals.ratio_interval(alone, together)


def _slowest(ranks: Sequence[tuple[int, BothTiming]], alone: str, together: str) -> Slowdown:
    figures = [(slowdown(getattr(t, alone), getattr(t, together)), rank) for rank, t in ranks]
    (ratio, interval), rank = max(figures, key=lambda f: (f[0][0], -f[1]))
    return Slowdown(ratio=ratio, interval=interval, rank=rank)


def _rate(samples: int, step: OpStats, every: int) -> float:
    """Samples / seconds over a rank's windows of one kind (step mean x steps x windows)."""
    seconds = step.mean * every * step.n
    return samples / seconds if seconds > 0 else 0.0


def summarize(ranks: Sequence[tuple[int, BothTiming]]) -> BothSummary | None:
    """Every rank's windows, as one summary; None when no rank ran them."""
    if not ranks:
        return None
    timings = [t for _, t in ranks]
    first = timings[0]

    def mean_of(attr: str) -> float:
        return round(stats.mean([getattr(t, attr).mean for t in timings]), ROUND)

    return BothSummary(
        every=first.every,
        cycles=min(t.cycles for t in timings),
        samples_per_second_alone=round(
            sum(_rate(t.samples_alone, t.step_alone, t.every) for t in timings), ROUND
        ),
        samples_per_second_together=round(
            sum(_rate(t.samples_together, t.step_together, t.every) for t in timings), ROUND
        ),
        au_alone=mean_of("au_alone"),
        au_together=mean_of("au_together"),
        save_seconds_alone=mean_of("save_alone"),
        save_seconds_together=mean_of("save_together"),
        stall_seconds_alone=mean_of("stall_alone"),
        stall_seconds_together=mean_of("stall_together"),
        loader_slowdown=_slowest(ranks, "step_alone", "step_together"),
        save_slowdown=_slowest(ranks, "save_alone", "save_together"),
        stall_slowdown=_slowest(ranks, "stall_alone", "stall_together"),
    )
