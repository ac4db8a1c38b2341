"""What lies inside each timed sample, observed in real ranks: the sample is ``barrier(); t0; op;
barrier(); t1`` and nothing else. Setup work, verification and the manual garbage collection run
outside it, and each sample's ``started_at`` (the mlperf procedure's span starts at the earliest
rank's) is read after the opening barrier, not while a rank waits there for a late one.

Two runs of real worker processes over gloo and DCP on a local folder, each recorded by
:mod:`tests.measure_probe`: the mlperf procedure on two ranks, rank 1 coming late to every
barrier; the ckptbench procedure (with its warm-up and manual collection) on three ranks whose
shard takes half a second to build.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results.summaries import RunSummary
from ckptbench.workload.storage import objects as objectio
from tests import measure_probe, workers
from tests.measure_probe import Rank

pytestmark = pytest.mark.timeout(180)

LATE_SECONDS = 0.1  # rank 1's lateness at each of the mlperf run's 20 barriers
BUILD_SECONDS = 0.5  # building a shard, in the ckptbench run
SLACK = 1e-4  # the results keep microseconds: a rounded instant may fall just before its cause


@dataclass
class Run:
    config: WorkloadConfig
    ranks: list[Rank]

    @property
    def summary(self) -> RunSummary:
        text = objectio.read_text(f"{self.config.results_path}/summary.json")
        return RunSummary.model_validate_json(text)


def _run(tmp: Path, env: dict[str, str], **overrides: object) -> Run:
    config = workers.small_config(str(tmp / "ckpt"), layer_size=100, **overrides)
    probe_dir = tmp / "probe"
    probe_dir.mkdir()
    extra = {measure_probe.ENV_DIR: str(probe_dir), **env}
    ranks = workers.run(config, tmp, command=measure_probe.COMMAND, extra_env=extra)
    assert [w.proc.returncode for w in ranks] == [0] * config.world_size, workers.logs(ranks)
    return Run(config, measure_probe.read_ranks(config, probe_dir))


@pytest.fixture(scope="module")
def mlperf(tmp_path_factory: pytest.TempPathFactory) -> Run:
    late = {measure_probe.ENV_LATE_RANK: "1", measure_probe.ENV_LATE_SECONDS: str(LATE_SECONDS)}
    tmp = tmp_path_factory.mktemp("mlperf")
    # Automatic collection: twenty full collections of a torch process would double the run.
    return _run(
        tmp,
        late,
        procedure="mlperf",
        sample_count=10,
        warmup_samples=0,
        garbage_collection="automatic",
    )


@pytest.fixture(scope="module")
def ckptbench(tmp_path_factory: pytest.TempPathFactory) -> Run:
    slow = {measure_probe.ENV_SLOW_BUILD: str(BUILD_SECONDS)}
    tmp = tmp_path_factory.mktemp("ckptbench")
    # Seven tensors on three ranks: uneven shards of 3, 2 and 2 tensors.
    return _run(tmp, slow, world_size=3, padding_size=7, sample_count=2, warmup_samples=1)


RUNS = ["mlperf", "ckptbench"]


def _windows(rank: Rank) -> list[tuple[float, float]]:
    """Every timed sample's window, in time order: saves, loads and (unless checkpoints are
    kept) the deletes, each opened by the loop's barrier."""
    ops = ["save", "load"] + (["delete"] if rank.result.delete is not None else [])
    return sorted(w for op in ops for w in rank.windows(op))


def _overlaps(span: tuple[float, float], window: tuple[float, float]) -> bool:
    return span[0] < window[1] - SLACK and span[1] > window[0] + SLACK


@pytest.mark.parametrize("name", RUNS)
def test_each_window_holds_its_dcp_call(name: str, request: pytest.FixtureRequest) -> None:
    # The windows the other tests check are the samples' own: each brackets one DCP call.
    run: Run = request.getfixturevalue(name)
    warmups = run.config.warmups
    for rank in run.ranks:
        for op in ("save", "load"):
            calls = rank.spans(f"dcp.{op}")[warmups:]
            windows = rank.windows(op)
            assert len(calls) == len(windows) == run.config.samples
            for (start, end), (called, returned) in zip(windows, calls, strict=True):
                assert start <= called + SLACK and returned <= end + SLACK


@pytest.mark.parametrize("name", RUNS)
def test_no_setup_or_verification_runs_inside_a_timed_sample(
    name: str, request: pytest.FixtureRequest
) -> None:
    run: Run = request.getfixturevalue(name)
    for rank in run.ranks:
        seen = {what: rank.spans(what) for what in measure_probe.SETUP}
        # Every kind of work ran (so its absence from the windows means something).
        assert all(seen.values()), {k: len(v) for k, v in seen.items()}
        for window in _windows(rank):
            inside = [w for w, spans in seen.items() for s in spans if _overlaps(s, window)]
            assert inside == [], f"rank {rank.result.rank}: {inside} inside {window}"


def test_a_slow_shard_build_stays_out_of_every_save(ckptbench: Run) -> None:
    # Building the shard took BUILD_SECONDS on every rank; saving a 1.2 MB shard takes far less.
    for rank in ckptbench.ranks:
        assert rank.spans("build_state") and rank.result.save is not None
        seconds = rank.result.save.seconds or []
        assert len(seconds) == 2 and max(seconds) < BUILD_SECONDS / 2, seconds
    summary = ckptbench.summary
    assert summary.save is not None and summary.save.max_seconds < BUILD_SECONDS / 2


def test_a_full_collection_runs_before_each_sample_and_none_inside(ckptbench: Run) -> None:
    # garbage_collection=manual (the default): a full gc.collect() before each timed operation,
    # outside it; automatic collection is off, so nothing else collects inside. A full
    # collection of a rank's process takes a few hundred milliseconds.
    assert ckptbench.config.garbage_collection.value == "manual"
    for rank in ckptbench.ranks:
        collections = list(zip(rank.times("gc-start"), rank.times("gc-stop"), strict=True))
        windows = sorted(_windows(rank))
        previous_end = 0.0
        for window in windows:
            inside = [c for c in collections if _overlaps(c, window)]
            assert inside == [], f"rank {rank.result.rank}: collection {inside} inside {window}"
            before = [c for c in collections if previous_end <= c[0] and c[1] <= window[0] + SLACK]
            assert before, f"rank {rank.result.rank}: no collection before the sample at {window}"
            previous_end = window[1]


def test_each_sample_starts_after_the_opening_barrier(mlperf: Run) -> None:
    # The mlperf procedure runs no warm-up: the loop's barriers open its 10 saves, its 10 loads
    # and the 10 deletes of the checkpoints they made.
    for rank in mlperf.ranks:
        opened = rank.times("barrier-exit")
        windows = _windows(rank)
        assert len(opened) == len(windows) == 30
        for barrier_done, (start, end) in zip(opened, windows, strict=True):
            assert start >= barrier_done - SLACK, (rank.result.rank, barrier_done, start)
            assert end >= start


def test_the_mlperf_duration_is_the_collective_not_the_wait_for_a_late_rank(mlperf: Run) -> None:
    # Rank 1 comes LATE_SECONDS late to each barrier, so the other rank waits there: the span
    # (latest end - earliest start) must not count that wait. Per sample, the slowest rank's
    # barrier-to-barrier seconds bound it (give or take how far apart ranks leave the barrier).
    figures = mlperf.summary.mlperf
    assert figures is not None
    for op, column in (("save", "write"), ("load", "read")):
        per_sample = zip(*(getattr(r.result, op).seconds for r in mlperf.ranks), strict=True)
        collective = [max(s) for s in per_sample]
        mean_collective = sum(collective) / len(collective)
        duration = figures[f"checkpoint_{column}_duration_secs"]
        assert duration <= mean_collective + LATE_SECONDS / 2, (op, duration, collective)
