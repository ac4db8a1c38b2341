"""The emulated accelerator: what it times, on a clock the test drives, and what it refuses to
hand on (a corrupted sample, a sample in another's place)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from ckptbench.workload.contract.data.choices import DataFormat
from ckptbench.workload.rank.data import accelerator, content
from ckptbench.workload.rank.data.batches import Batch, Item, collate
from ckptbench.workload.rank.data.content import SampleError

SIZE = 128


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _batch(first: int, n: int = 2) -> Batch:
    return collate([Item(content.split(content.sample(0, i, SIZE)), asked=i, fetches=1)
                    for i in range(first, first + n)])  # fmt: skip


class Loader:
    """A loader whose batches take ``waits[i]`` seconds to arrive, on the clock."""

    def __init__(self, clock: Clock, waits: list[float]) -> None:
        self.clock, self.waits = clock, waits

    def __iter__(self) -> Iterator[Batch]:
        for i, w in enumerate(self.waits):
            self.clock.now += w
            yield _batch(2 * i)


def _plan(epochs: int = 1, compute: float = 0.5, verify: bool = True) -> accelerator.Plan:
    return accelerator.Plan(epochs=epochs, batch_size=2, workers=0, prefetch_factor=2,
                            compute_seconds=compute, verify=verify, format=DataFormat.RAW,
                            sample_bytes=SIZE)  # fmt: skip


def _run(monkeypatch: pytest.MonkeyPatch, waits: list[float], plan: accelerator.Plan,
         check_seconds: float = 0.0) -> accelerator.Figures:  # fmt: skip
    clock = Clock()
    monkeypatch.setattr(time, "perf_counter", clock)
    real_check = accelerator.check

    def slow_check(*args: Any) -> None:
        real_check(*args)
        clock.now += check_seconds

    monkeypatch.setattr(accelerator, "check", slow_check)

    def busy(seconds: float) -> None:
        clock.now += seconds

    def make(epoch: int) -> Loader:
        # The second epoch waits longest for its first batch, the first one least.
        return Loader(clock, [waits[0] + (0, 2, 1)[epoch % 3], *waits[1:]])

    return accelerator.run(make, plan, threading.Event(), busy)  # type: ignore[arg-type]


def test_utilisation_is_compute_over_waits_and_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    fig = _run(monkeypatch, [2.0, 0.5, 0.5], _plan(compute=1.0))
    assert fig.compute_seconds == 3.0
    assert fig.epoch_seconds == [6.0]
    assert fig.utilization == pytest.approx(0.5)
    assert fig.waits == [2.0, 0.5, 0.5]
    assert fig.first_batch_seconds == 2.0
    assert (fig.samples, fig.batches, fig.bytes, fig.fetches) == (6, 3, 6 * SIZE, 6)


def test_checking_is_timed_apart_and_kept_out_of_the_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    fig = _run(monkeypatch, [1.0, 1.0], _plan(compute=1.0), check_seconds=5.0)
    assert fig.verify_seconds == 10.0
    assert fig.epoch_seconds == [4.0]
    assert fig.verified_bytes == 4 * SIZE


def test_without_checks_nothing_is_verified(monkeypatch: pytest.MonkeyPatch) -> None:
    fig = _run(monkeypatch, [1.0], _plan(verify=False), check_seconds=5.0)
    assert fig.verified_bytes == 0 and fig.verify_seconds == 0


def test_each_epoch_is_timed_and_the_first_batch_is_the_slowest_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fig = _run(monkeypatch, [3.0, 0.1], _plan(epochs=3, compute=0.0))
    assert fig.epoch_seconds == [pytest.approx(3.1), pytest.approx(5.1), pytest.approx(4.1)]
    assert fig.first_batch_seconds == 5.0
    assert fig.epoch_samples == [4, 4, 4]
    assert fig.compute_seconds == 0.0 and fig.utilization == 0.0


def test_a_corrupted_sample_is_refused_by_name() -> None:
    batch = _batch(4)
    batch.data[1, 40] ^= 1
    with pytest.raises(SampleError, match=r"sample 5: .*crc32c"):
        accelerator.check(batch, DataFormat.RAW, SIZE)


def test_a_sample_in_anothers_place_is_refused_by_name() -> None:
    batch = _batch(4)
    batch.asked[0] = 9
    with pytest.raises(SampleError, match="sample 4 handed over where sample 9 was asked for"):
        accelerator.check(batch, DataFormat.RAW, SIZE)


def test_a_sample_whose_index_the_dataset_cannot_say_is_still_checked() -> None:
    batch = _batch(4)
    batch.asked[:] = -1
    accelerator.check(batch, DataFormat.RAW, SIZE)
    batch.data[0, 5] ^= 1  # the index its header carries
    with pytest.raises(SampleError, match="crc32c"):
        accelerator.check(batch, DataFormat.RAW, SIZE)


def test_a_batch_travels_as_one_tensor_of_its_samples() -> None:
    batch = _batch(0, 3)
    assert batch.data.shape == (3, SIZE) and batch.data.dtype == torch.uint8
    assert np.array_equal(
        batch.data[1].numpy(), np.frombuffer(content.sample(0, 1, SIZE), np.uint8)
    )
