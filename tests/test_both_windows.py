"""Both demands at once, with a modelled clock: the windows interleave, the loader is closed in
every save-alone window (and open around every together save), and each slowdown is together /
alone with its interval (workload/rank/both/windows.py, contract/results/both.py). No timing:
time is what the modelled side says each act costs."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest

from ckptbench.workload.contract.results import both
from ckptbench.workload.contract.results.both import ORDER, Window, schedule
from ckptbench.workload.contract.results.rank import OpStats
from ckptbench.workload.rank.both import windows


@dataclass
class _Save:
    side: _Modelled
    started: float
    length: float
    stall: float

    def durable(self) -> float:
        # The save ends `length` after its call; waiting for it advances the clock to its end.
        self.side.now = max(self.side.now, self.started + self.length)
        return self.length


@dataclass
class _Modelled:
    """A rank whose acts cost modelled seconds: a batch costs more while a save is in flight,
    a save costs more while the loader reads; every act is logged with the loader's state."""

    batch_alone: float = 0.010
    batch_with_save: float = 0.030
    save_alone: float = 1.0
    save_with_loader: float = 1.5
    stall_alone: float = 0.1
    stall_with_loader: float = 0.2
    compute_seconds: float = 0.020
    queue: int = 0  # batches the workers hold ready at most (workers x prefetch)
    now: float = 0.0
    reading: bool = False
    ready: float = 0.0  # batches fetched ahead, filled while the loader waits to be asked
    asked_at: float = 0.0
    inflight: _Save | None = None
    log: list[tuple[str, bool]] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def meet(self) -> None:
        self.log.append(("meet", self.reading))

    def open_loader(self) -> None:
        self.reading = True
        self.ready, self.asked_at = 0.0, self.now
        self.log.append(("open", True))

    def idle(self, seconds: float) -> None:
        self.log.append(("idle", self.reading))
        self.now += seconds

    def close_loader(self) -> None:
        self.reading = False
        self.log.append(("close", False))

    def batch(self) -> tuple[int, float]:
        assert self.reading, "a batch from a closed loader"
        flying = self.inflight is not None and self.now < self.inflight.started + (
            self.inflight.length
        )
        cost = self.batch_with_save if flying else self.batch_alone
        # The workers fetched ahead while nobody asked, up to the queue's depth.
        self.ready = min(self.queue, self.ready + (self.now - self.asked_at) / cost)
        if self.ready >= 1:
            self.ready -= 1
        else:
            self.now += cost
        self.asked_at = self.now
        return 4, 0.0

    def compute(self) -> float:
        self.now += self.compute_seconds
        return self.compute_seconds

    def start_save(self) -> _Save:
        self.log.append(("save", self.reading))
        stall = self.stall_with_loader if self.reading else self.stall_alone
        length = self.save_with_loader if self.reading else self.save_alone
        self.inflight = _Save(self, self.now, length, stall)
        self.now += stall
        return self.inflight


def test_the_windows_interleave_alone_and_together() -> None:
    assert schedule(3) == list(ORDER) * 3
    kinds = schedule(4)
    # Never two windows of a kind in a row: each side's alone and together alternate in time.
    assert all(a is not b for a, b in itertools.pairwise(kinds))
    assert kinds.index(Window.TOGETHER) < len(ORDER)
    assert kinds[-len(ORDER) :] == list(ORDER)


def test_the_loader_is_closed_in_save_alone_windows_and_open_around_together_saves() -> None:
    side = _Modelled()
    measured = windows.run(3, 5, side)
    assert [m.window for m in measured] == schedule(3)
    saves = [reading for act, reading in side.log if act == "save"]
    # save alone, together, per cycle: the first with the loader closed, the second open.
    assert saves == [False, True] * 3
    meets = [reading for act, reading in side.log if act == "meet"]
    assert not any(meets), "the loader left running into the next window"


def test_figures_of_each_window_kind() -> None:
    side = _Modelled()
    measured = windows.run(2, 5, side)
    got = windows.timing(measured, 5, 2, side.compute_seconds)
    assert got.stall_alone.mean == pytest.approx(0.1)
    assert got.stall_together.mean == pytest.approx(0.2)
    assert got.save_alone.mean == pytest.approx(1.0)
    assert got.save_together.mean == pytest.approx(1.5)
    # Steps with a save in flight take a slower batch: 0.030 + 0.020 against 0.010 + 0.020.
    assert got.step_together.mean == pytest.approx(0.050)
    assert got.step_alone.mean == pytest.approx(0.030)
    assert got.au_alone.mean == pytest.approx(0.020 / 0.030)
    assert got.au_together.mean == pytest.approx(0.020 / 0.050)
    assert got.samples_alone == got.samples_together == 2 * 5 * 4


def test_a_loader_alone_window_gets_the_head_start_a_together_window_had() -> None:
    # Reads cost the same beside a save as alone, and the workers fill a queue of 4 batches
    # ahead: the loader's slowdown must be 1, as long as the windows started their timed steps
    # with queues filled alike (the save call lets a together window's queue fill).
    side = _Modelled(queue=4, batch_with_save=0.010, compute_seconds=0.005)
    measured = windows.run(3, 6, side)
    got = windows.timing(measured, 6, 3, side.compute_seconds)
    assert both.slowdown(got.step_alone, got.step_together)[0] == pytest.approx(1.0)
    idles = [reading for act, reading in side.log if act == "idle"]
    assert idles == [True] * 3  # each loader-alone window, its loader open
    held = [m.held for m in measured if m.window is not Window.SAVE_ALONE]
    assert held == pytest.approx([0.2] * 6)


def _stats(values: list[float]) -> OpStats:
    return OpStats.of(values)


def test_a_slowdown_is_together_over_alone_with_an_interval_around_it() -> None:
    alone = _stats([1.0, 1.1, 0.9, 1.0])
    together = _stats([2.0, 2.2, 1.8, 2.0])
    ratio, interval = both.slowdown(alone, together)
    assert ratio == pytest.approx(2.0)
    assert interval is not None and interval.high is not None
    assert interval.low < 2.0 < interval.high
    assert interval.low > 1.0  # told apart from no slowdown at all
    same, around = both.slowdown(alone, alone)
    assert same == pytest.approx(1.0)
    assert around is not None and around.high is not None and around.low < 1.0 < around.high
    assert both.slowdown(_stats([1.0]), _stats([2.0]))[1] is None  # one window: no interval


def test_the_summary_reports_the_slowest_rank_and_rates() -> None:
    side = _Modelled()
    first = windows.timing(windows.run(2, 5, side), 5, 2, side.compute_seconds)
    slower = _Modelled(save_with_loader=3.0)
    second = windows.timing(windows.run(2, 5, slower), 5, 2, slower.compute_seconds)
    summary = both.summarize([(0, first), (1, second)])
    assert summary is not None
    assert summary.save_slowdown.rank == 1
    assert summary.save_slowdown.ratio == pytest.approx(3.0)
    assert summary.stall_slowdown.ratio == pytest.approx(2.0)
    assert summary.loader_slowdown.ratio == pytest.approx(0.050 / 0.030)
    # 4 samples a step, every 0.030 s alone and 0.050 s together, on each of two ranks.
    assert summary.samples_per_second_alone == pytest.approx(2 * 4 / 0.030)
    assert summary.samples_per_second_together == pytest.approx(2 * 4 / 0.050)
    assert both.summarize([]) is None
