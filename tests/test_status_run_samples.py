"""The operator's status agrees with results/summary.json at every sample count (issue 34, item 2).

Found: past about 12 samples a rank's termination message drops its per-sample lists, and the
status fell back to the slowest rank's own statistics (load max 15% low, p99 one rank's) while
summary.json, written from the full results, was right. Rank 0 now reduces every rank's full lists
to the run's per-sample vectors and sends them in its own message, or where they do not fit (past
about 100 samples) their figures; the status computed from the messages alone must equal
summary.json's figures exactly, and say so when rank 0 sent neither.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ckptbench.operator.status.aggregate import operation
from ckptbench.operator.status.memo import StatusMemo
from ckptbench.workload.contract.choices import Procedure
from ckptbench.workload.contract.results import figures
from ckptbench.workload.contract.results.mlperf_figures import sample_rates
from ckptbench.workload.contract.results.rank import (
    TERMINATION_MESSAGE_LIMIT,
    OpTiming,
    RankResult,
    RunFigures,
)
from ckptbench.workload.contract.results.records import record_of
from ckptbench.workload.contract.results.run_samples import Vectors, pack, unpack
from ckptbench.workload.contract.results.summaries import RunSummary
from ckptbench.workload.contract.settings import MAX_CHECKPOINTS_SAMPLES
from ckptbench.workload.local.report import format_table
from tests import workers

RANKS = 4
SAMPLES = 100
SHARD = 1 << 30
START = 1_764_300_000.0


def _timing(rng: random.Random, rank: int, base: float) -> OpTiming:
    seconds = [round(base * rng.uniform(0.8, 1.6), 6) for _ in range(SAMPLES)]
    starts = [round(START + 100 * i + rng.uniform(0, 0.05), 6) for i in range(SAMPLES)]
    ends = [round(s + x, 6) for s, x in zip(starts, seconds, strict=True)]
    io = [round(x * 0.9, 6) for x in seconds]
    return OpTiming.of(seconds, io, [0.01] * SAMPLES, started_at=starts, ended_at=ends)


def _full_results(seed: int = 5) -> list[RankResult]:
    rng = random.Random(seed)
    return [
        RankResult(
            rank=r,
            bytes=SHARD,
            save=_timing(rng, r, 2.0 + r * 0.1),
            load=_timing(rng, r, 1.0 + r * 0.05),
            delete=_timing(rng, r, 0.2),
            verified=True,
        )
        for r in range(RANKS)
    ]


def test_the_status_from_messages_equals_summary_json_at_100_samples() -> None:
    full = _full_results()
    # What rank 0 does after gathering (worker.py): the run's vectors in its own result.
    run = figures.run_samples_of([record_of(r) for r in full], RANKS * SHARD)
    full[0] = full[0].model_copy(update={"run": run})
    summary_json = figures.summarize(full, RANKS, RANKS * SHARD)

    messages = [r.to_termination_message() for r in full]
    assert all(len(m.encode()) <= TERMINATION_MESSAGE_LIMIT for m in messages)
    parsed = [RankResult.from_termination_message(m) for m in messages]
    assert all(p.save is not None and p.save.seconds is None for p in parsed)  # lists dropped
    assert parsed[0].run == run.without_figures()  # the vectors fit: the figures are left out

    status = StatusMemo().summary([record_of(p) for p in parsed], RANKS, RANKS * SHARD, None)
    for name in ("save", "load", "delete"):
        expected, got = getattr(summary_json, name), getattr(status, name)
        assert got == expected, name
        assert expected.samples == SAMPLES and expected.seconds is not None
        # In status form too (what the CR's .status shows).
        shown = operation(got, {})
        assert shown.p99_seconds == expected.p99_seconds and shown.seconds == expected.seconds
    # And the figures are the run's, not the slowest rank's: the per-sample max over ranks.
    load_max = max(max(r.load.seconds or []) for r in full if r.load is not None)
    assert status.load is not None and status.load.max_seconds == load_max


def test_packing_is_exact_and_bounded() -> None:
    rng = random.Random(1)
    seconds = [round(rng.uniform(0, 5000), 6) for _ in range(500)]
    spans = [round(x + rng.uniform(0, 1), 6) for x in seconds]
    assert unpack(pack(Vectors(seconds, spans))) == Vectors(seconds, spans)
    assert unpack(pack(Vectors(seconds, None))) == Vectors(seconds, None)


def test_forged_run_samples_make_the_message_unreadable() -> None:
    import base64
    import zlib

    from pydantic import ValidationError

    bomb = base64.b64encode(zlib.compress(b"\x00" * 2_000_000)).decode()
    for forged in ["not base64!", base64.b64encode(b"plain").decode(), bomb]:
        with pytest.raises(ValidationError):
            RankResult.model_validate({"rank": 0, "run": {"ranks": 1, "save": forged}})


def test_real_ranks_messages_give_the_summary_json_figures(tmp_path: Path) -> None:
    # Two real ranks with 40 samples: their own lists no longer fit in their messages.
    config = workers.small_config(
        f"file://{tmp_path}/ckpt", layer_size=10, padding_size=2, sample_count=40
    )
    ranks = workers.run(config, tmp_path)
    assert all(w.proc.returncode == 0 for w in ranks), workers.logs(ranks)
    messages = [w.termination_path.read_text() for w in ranks]
    parsed = [RankResult.from_termination_message(m) for m in messages]
    assert parsed[1].save is not None and parsed[1].save.seconds is None  # dropped
    assert parsed[0].run is not None and parsed[0].run.ranks == 2
    status = StatusMemo().summary(
        [record_of(p) for p in parsed], config.world_size, config.total_bytes, None
    )
    written = RunSummary.model_validate_json(
        Path(f"{config.results_path}/summary.json").read_text()
    )
    for name in ("save", "load", "delete"):
        assert getattr(status, name) == getattr(written, name), name
    assert written.save is not None and written.save.seconds is not None
    assert len(written.save.seconds) == 40


# -- past what the vectors can hold: rank 0's figures (issue 34, item 2, at every sample count) --

MANY = 400
_LISTS = ("seconds", "span_seconds")  # the per-sample lists: summary.json's, never a message's


def _varied(rng: random.Random, n: int, base: float) -> list[float]:
    # Heavy-tailed, so a rank's own max, mean and p99 differ from the run's per-sample ones.
    return [round(base * rng.uniform(0.8, 1.2) * (3.0 if rng.random() < 0.03 else 1.0), 6)
            for _ in range(n)]  # fmt: skip


def _timing_of(rng: random.Random, n: int, base: float) -> OpTiming:
    seconds = _varied(rng, n, base)
    starts = [round(START + 100 * i + rng.uniform(0, 0.05), 6) for i in range(n)]
    ends = [round(s + x, 6) for s, x in zip(starts, seconds, strict=True)]
    return OpTiming.of(
        seconds, [round(x * 0.9, 6) for x in seconds], started_at=starts, ended_at=ends
    )


def _many(n: int = MANY, seed: int = 7) -> list[RankResult]:
    """Ranks with ``n`` varied samples each, run by the mlperf procedure (its per-sample rates are
    figures over the samples too), rank 0 holding the run's reduction as worker.py makes it."""
    rng = random.Random(seed)
    full = [
        RankResult(
            rank=r,
            bytes=SHARD,
            save=_timing_of(rng, n, 2.0 + r * 0.1),
            load=_timing_of(rng, n, 1.0 + r * 0.05),
            delete=_timing_of(rng, n, 0.2),
            verified=True,
            procedure=Procedure.MLPERF,
        )
        for r in range(RANKS)
    ]
    run = figures.run_samples_of([record_of(r) for r in full], RANKS * SHARD)
    full[0] = full[0].model_copy(update={"run": run})
    return full


def _status_of(messages: list[str]) -> RunSummary:
    parsed = [RankResult.from_termination_message(m) for m in messages]
    return StatusMemo().summary([record_of(p) for p in parsed], RANKS, RANKS * SHARD, None)


@pytest.mark.parametrize("samples", [200, MANY, MAX_CHECKPOINTS_SAMPLES])
def test_the_status_equals_summary_json_past_100_samples(samples: int) -> None:
    full = _many(samples)
    summary_json = figures.summarize(full, RANKS, RANKS * SHARD)
    messages = [r.to_termination_message() for r in full]
    assert all(len(m.encode()) <= TERMINATION_MESSAGE_LIMIT for m in messages)
    parsed = [RankResult.from_termination_message(m) for m in messages]
    assert all(p.save is not None and p.save.seconds is None for p in parsed)  # lists dropped
    run = parsed[0].run
    assert run is not None and run.save is None and run.load is None  # the vectors do not fit
    for name in ("save", "load", "delete"):  # each operation's vectors, else their figures
        assert run.vectors(name) is not None or run.figures(name) is not None, name

    status = _status_of(messages)
    for name in ("save", "load", "delete"):
        expected, got = getattr(summary_json, name), getattr(status, name)
        assert expected.samples == samples and expected.seconds is not None
        assert got.per_sample == expected.per_sample == "run", name
        assert got.model_dump(exclude=set(_LISTS)) == expected.model_dump(exclude=set(_LISTS))
        shown = operation(got, {})  # in status form too
        assert shown.p99_seconds == expected.p99_seconds
        assert shown.span_mean_seconds == expected.span_mean_seconds
    assert status.mlperf == summary_json.mlperf
    assert status.mlperf is not None and "load_checkpoint_io_stdev_GB_per_second" in status.mlperf
    # The run's figures, not the slowest rank's: the per-sample max over ranks.
    load_max = max(max(r.load.seconds or []) for r in full if r.load is not None)
    assert status.load is not None and status.load.max_seconds == load_max
    # The data tells the two apart: without rank 0's figures the load's differ.
    alone = [full[0].model_copy(update={"run": None}), *full[1:]]
    fallback = _status_of([r.to_termination_message() for r in alone]).load
    assert fallback is not None and fallback.per_sample == "slowest rank"
    assert fallback.mean_seconds != status.load.mean_seconds
    assert fallback.stdev_seconds != status.load.stdev_seconds


def test_rank0s_message_keeps_the_figures_under_the_limit_at_10000_samples() -> None:
    # A rank's lists are bounded (MAX_SAMPLES_LISTED), the run's figures are not lists: rank 0's
    # message with figures of 10,000 samples per operation, beside its own result at the most.
    rng = random.Random(3)
    vectors = Vectors(_varied(rng, 10_000, 5.0), _varied(rng, 10_000, 5.5))
    found = RunFigures.of(vectors, sample_rates(vectors.spans or [], RANKS * SHARD))
    full = _many(2000)[0]
    assert full.run is not None
    rank0 = full.model_copy(
        update={
            "run": full.run.model_copy(
                update={f"{op}_figures": found for op in ("save", "load", "delete")}
            ),
            "error": "E" * 900,  # a failed verification's text, say, as long as it can be
        }
    )
    message = rank0.to_termination_message()
    assert len(message.encode()) <= TERMINATION_MESSAGE_LIMIT
    kept = RankResult.from_termination_message(message).run
    assert kept is not None and kept.save is None
    assert kept.save_figures == kept.load_figures == kept.delete_figures == found
    assert found.seconds.n == 10_000


def test_without_rank0s_figures_the_status_says_it_fell_back() -> None:
    full = _many()
    failed0 = full[0].model_copy(update={"run": None})  # rank 0 failed after its samples
    partial = full[0].model_copy(
        update={"run": figures.run_samples_of([record_of(r) for r in full[:2]], RANKS * SHARD)}
    )  # rank 0 gathered two ranks only
    for rank0 in (failed0, partial):
        status = _status_of([r.to_termination_message() for r in [rank0, *full[1:]]])
        for name in ("save", "load", "delete"):
            assert getattr(status, name).per_sample == "slowest rank", name
        shown = operation(status.load, {}) if status.load is not None else None
        assert shown is not None and shown.per_sample == "slowest rank"
        table = format_table([("run", status)])
        assert "load per-sample from" in table and "slowest rank" in table
    # And with rank 0's figures, the table says nothing of it.
    good = _status_of([r.to_termination_message() for r in full])
    assert "per-sample from" not in format_table([("run", good)])


def test_an_operations_vectors_stay_beside_the_others_figures() -> None:
    # Delete's and load's vectors too long for the reduction (run_samples_of leaves them out),
    # save's fitting: the message keeps save's vectors and the others' figures, not one alone.
    full = _many(300)
    assert full[0].run is not None
    run = full[0].run.model_copy(update={"load": None, "delete": None})
    full[0] = full[0].model_copy(update={"run": run})
    messages = [r.to_termination_message() for r in full]
    kept = RankResult.from_termination_message(messages[0]).run
    assert kept is not None and kept.save is not None and kept.save_figures is None
    assert kept.load_figures is not None and kept.delete_figures is not None
    status, summary_json = _status_of(messages), figures.summarize(full, RANKS, RANKS * SHARD)
    assert status.save is not None and status.save == summary_json.save  # lists and all
    for name in ("load", "delete"):
        expected, got = getattr(summary_json, name), getattr(status, name)
        assert got.model_dump(exclude=set(_LISTS)) == expected.model_dump(exclude=set(_LISTS))
