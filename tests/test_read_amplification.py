"""Read amplification: bytes a rank read from storage over the stored bytes its load plan needed.

The counter sits in the storage layer of every backend (``workload/storage/traffic.py``): a
stream that is read once must count once, not twice and not zero times; a reader that reads
exactly its own shard must show exactly 1.0; a whole-object reader on a resharding load, more.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.filesystem import FileSystem
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem

from ckptbench.workload.contract.results import figures
from ckptbench.workload.contract.results.rank import OpTiming, RankResult
from ckptbench.workload.storage import traffic

ROOT = Path(__file__).resolve().parent.parent
ENV = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}


def test_a_stream_read_once_counts_once(tmp_path: Path) -> None:
    counted = traffic.Traffic()
    fs = traffic.CountingFileSystem(FileSystem(), counted)
    payload = bytes(range(256)) * 40  # 10,240 bytes
    with fs.create_stream(tmp_path / "f", "wb") as out:
        out.write(payload[:4000])
        out.write(memoryview(payload)[4000:])
    assert counted.sent == len(payload) and counted.received == 0
    with fs.create_stream(tmp_path / "f", "rb") as stream:
        head = stream.read(1000)
        buf = bytearray(3000)
        assert stream.readinto(buf) == 3000
        rest = stream.read()
    assert head + bytes(buf) + rest == payload
    assert counted.received == len(payload)


class _FsspecLike:
    """An fsspec file whose read-ahead cache fetched more than it handed over."""

    def __init__(self, data: bytes, fetched: int) -> None:
        self._data = data
        self.cache = type("Cache", (), {"total_requested_bytes": fetched})()

    def read(self, size: int = -1) -> bytes:
        return self._data if size < 0 else self._data[:size]


def test_an_fsspec_stream_counts_what_it_fetched_not_that_plus_what_it_handed_over() -> None:
    counted = traffic.Traffic()
    stream = traffic.CountingStream(_FsspecLike(b"x" * 100, fetched=5000), counted)
    assert stream.read(100) == b"x" * 100
    stream.settle()
    stream.settle()  # settling twice adds nothing
    assert counted.received == 5000


def _plan_and_metadata(rows_needed: int) -> tuple[LoadPlan, Metadata, dict[Any, Any]]:
    # One saved chunk of a (10, 4) tensor, rows 0..9, stored as a 2,000-byte blob; a byte item.
    chunk = ChunkStorageMetadata(offsets=torch.Size([0, 0]), sizes=torch.Size([10, 4]))
    tensor = TensorStorageMetadata(TensorProperties(), torch.Size([10, 4]), [chunk])
    metadata = Metadata(state_dict_metadata={"w": tensor, "b": object()})  # type: ignore[dict-item]
    w = MetadataIndex("w", torch.Size([0, 0]))
    b = MetadataIndex("b")
    plan = LoadPlan(
        [
            ReadItem(LoadItemType.TENSOR, w, torch.Size([0, 0]), w, torch.Size([0, 0]),
                     torch.Size([rows_needed, 4])),
            ReadItem(LoadItemType.BYTE_IO, b, torch.Size([0]), b, torch.Size([0]),
                     torch.Size([0])),
        ]
    )  # fmt: skip
    storage = {w: type("I", (), {"length": 2000})(), b: type("I", (), {"length": 77})()}
    return plan, metadata, storage


@pytest.mark.parametrize(("rows", "needed"), [(10, 2000 + 77), (5, 1000 + 77), (1, 200 + 77)])
def test_a_plan_needs_the_stored_bytes_of_the_part_of_each_chunk_it_loads(
    rows: int, needed: int
) -> None:
    plan, metadata, storage = _plan_and_metadata(rows)
    assert traffic.needed_bytes(plan, metadata, storage) == needed


def test_the_summary_ratio_is_summed_over_ranks_and_the_worst_rank_named() -> None:
    def rank(r: int, read: int, needed: int) -> RankResult:
        t = OpTiming.of([1.0], [0.5])
        load = t.model_copy(update={"read_bytes": read, "needed_bytes": needed})
        return RankResult(rank=r, bytes=10, save=t, load=load)

    # Rank 2 read nothing and needed nothing (outside a resharding load's world): left out.
    summary = figures.summarize([rank(0, 300, 200), rank(1, 100, 100), rank(2, 0, 0)], 3, 30)
    assert summary.load is not None
    assert summary.load.read_amplification == pytest.approx(400 / 300)
    assert summary.load.max_rank_read_amplification == pytest.approx(1.5)
    assert summary.save is not None and summary.save.read_amplification is None


def _run(tmp_path: Path, *argv: str) -> dict[str, Any]:
    out = tmp_path / "run.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "run", *argv, "--samples", "2", "--warmup", "0",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=280, env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [run] = json.loads(out.read_text())["runs"]
    return dict(run)


def _rank_results(run: dict[str, Any], storage: Path) -> list[RankResult]:
    folder = storage / run["extra"]["settings"]["run_id"] / "results"
    return [
        RankResult.model_validate_json(p.read_text()) for p in sorted(folder.glob("rank-*.json"))
    ]


@pytest.mark.timeout(200)
def test_a_rank_that_reads_exactly_its_own_shard_shows_exactly_one(tmp_path: Path) -> None:
    # gcs with small tensors: each rank's items are read in coalesced ranges that cover exactly
    # its stored blobs (too small to be read directly, too few to learn their layout first).
    run = _run(tmp_path, "--emulator", "--backend", "gcs", "--world-size", "2",
               "--layer-size", "50", "--padding-size", "4")  # fmt: skip
    assert run["load"]["read_amplification"] == 1.0
    assert run["load"]["max_rank_read_amplification"] == 1.0
    # The same counter gives each rank's bytes sent: two saves of the checkpoint as stored.
    assert run["resources"]["sent_bytes"] == 2 * run["extra"]["checkpoint"]["stored_bytes"]


@pytest.mark.slow
@pytest.mark.timeout(280)
def test_a_whole_object_reader_on_a_resharding_load_reads_more_than_it_needs(
    tmp_path: Path,
) -> None:
    # Saved on 3 ranks, loaded on 2: each loading rank needs a chunk and a half of the saved
    # ones and DCP's file reader reads both chunks whole: about 4/3, plus torch.load's reads.
    storage = tmp_path / "ckpt"
    run = _run(tmp_path, "--storage", str(storage), "--model", "llama3-debug",
               "--world-size", "3", "--load-world-size", "2")  # fmt: skip
    load = run["load"]
    assert 4 / 3 <= load["read_amplification"] < 1.45
    loading = [r for r in _rank_results(run, storage) if r.rank < 2]
    for r in loading:
        assert r.load is not None and r.load.read_bytes and r.load.needed_bytes
        # What the plan needs is what the load template holds, plus each blob's framing.
        assert r.load_bytes is not None
        needed = r.load.needed_bytes / r.load.stats.n  # the totals are over the timed samples
        assert r.load_bytes <= needed <= 1.05 * r.load_bytes
        assert r.load.read_bytes >= r.load.needed_bytes


def test_the_ratio_reaches_the_csv_table_status_and_metrics() -> None:
    import csv
    import io

    from ckptbench.operator.runtime import metrics
    from ckptbench.operator.spec.status_schema import status_body
    from ckptbench.operator.status.aggregate import operation
    from ckptbench.workload.local import report_rows
    from ckptbench.workload.local.outputs import csvfile

    t = OpTiming.of([1.0], [0.5])
    ranks = [
        RankResult(rank=r, bytes=10, save=t, load=t.model_copy(update={"read_bytes": 3 * (r + 1),
                   "needed_bytes": 2 * (r + 1) - r}))
        for r in range(2)
    ]  # fmt: skip
    summary = figures.summarize(ranks, 2, 20)
    assert summary.load is not None
    assert summary.load.read_amplification == pytest.approx(9 / 5)
    assert summary.load.max_rank_read_amplification == pytest.approx(2.0)
    [row] = list(csv.DictReader(io.StringIO(csvfile.to_csv([("c", summary)]))))
    assert float(row["load_read_amplification"]) == summary.load.read_amplification
    assert float(row["load_max_rank_read_amplification"]) == 2.0
    rows = {r.label: r for r in report_rows.rows_for([summary])}
    assert rows["load read amplification"].value(summary) == summary.load.read_amplification
    status = status_body(operation(summary.load, {}))
    assert status["readAmplification"] == summary.load.read_amplification
    try:
        metrics.update_benchmark("ns", "ra", "gcs", {"load": status})
        labels = {"namespace": "ns", "name": "ra", "backend": "gcs"}
        get = metrics.REGISTRY.get_sample_value
        name = "ckptbench_benchmark_read_amplification_ratio"
        assert get(name, {**labels, "kind": "aggregate"}) == summary.load.read_amplification
        assert get(name, {**labels, "kind": "max_rank"}) == 2.0
    finally:
        metrics.remove_benchmark("ns", "ra")
