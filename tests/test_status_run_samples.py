"""The operator's status agrees with results/summary.json at 100 samples (issue 34, item 2).

Found: past about 12 samples a rank's termination message drops its per-sample lists, and the
status fell back to the slowest rank's own statistics (load max 15% low, p99 one rank's) while
summary.json, written from the full results, was right. Rank 0 now reduces every rank's full lists
to the run's per-sample vectors and sends them in its own message; the status computed from the
messages alone must equal summary.json's figures exactly.
"""

from __future__ import annotations

import random
from pathlib import Path

from ckptbench.operator.status.aggregate import operation
from ckptbench.operator.status.memo import StatusMemo
from ckptbench.workload.contract.results import figures
from ckptbench.workload.contract.results.rank import (
    TERMINATION_MESSAGE_LIMIT,
    OpTiming,
    RankResult,
)
from ckptbench.workload.contract.results.records import record_of
from ckptbench.workload.contract.results.run_samples import Vectors, pack, unpack
from ckptbench.workload.contract.results.summaries import RunSummary
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
    run = figures.run_samples_of([record_of(r) for r in full])
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

    import pytest
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
