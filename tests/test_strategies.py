"""Checkpoint strategies: sharded (DCP, each rank its shards), full (gathered to rank 0, one
object through the backend's stream) and replicated (every rank the whole state, DCP dedups)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.storage import objects as objectio
from tests import workers
from tests.workers import small_config

ROOT = Path(__file__).resolve().parent.parent
ENV = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"strategy": "full", "model": "llama3-debug"},
         "strategy: full and replicated need the reference layout .*got strategy=full"),
        ({"strategy": "replicated", "model": "llama3-debug"},
         "strategy: full and replicated need the reference layout .*got strategy=replicated"),
        ({"strategy": "full", "load_shard_offset": 1},
         "strategy: .* no load_shard_offset: .*no rank of theirs has a shard of its own"),
        ({"strategy": "diagonal"}, "strategy"),
        ({"strategy": "full", "async_save": True}, "async_save: cannot be true with strategy full"),
    ],
)  # fmt: skip
def test_layouts_that_make_no_sense_are_refused_by_name(
    tmp_path: Path, changes: dict[str, object], words: str
) -> None:
    with pytest.raises(ValidationError, match=words):
        small_config(str(tmp_path / "c"), **changes)


def test_the_cr_takes_the_strategy_and_refuses_it_with_a_model() -> None:
    base = {"worldSize": 2, "checkpointPath": "gs://bucket/x"}
    spec = CheckpointBenchmarkSpec.model_validate({**base, "strategy": "full", "layerSize": 10,
                                                   "paddingSize": 2})  # fmt: skip
    assert spec.strategy == "full"
    with pytest.raises(ValidationError, match="strategy"):
        CheckpointBenchmarkSpec.model_validate(
            {**base, "strategy": "replicated", "model": "llama3-debug"}
        )


@pytest.mark.timeout(120)
def test_full_gathers_to_rank_0_which_alone_writes_one_object_and_reads_it_back(
    tmp_path: Path,
) -> None:
    config = small_config(str(tmp_path / "ckpt"), strategy="full", padding_size=3,
                          keep_checkpoints=True)  # fmt: skip
    ranks = workers.run(config, tmp_path)
    assert [w.proc.returncode for w in ranks] == [0, 0], workers.logs(ranks)
    first, second = (w.result for w in ranks)
    assert first.verified is True and second.verified is True
    total = sizes.total_bytes(config.layer_size, config.padding_size)
    assert (first.load_bytes, second.load_bytes) == (total, 0)
    assert (first.bytes, second.bytes) == (total, 0)  # rank 0 alone writes, all of it
    assert first.resources is not None and second.resources is not None
    assert second.resources.sent_bytes == 0  # rank 1 only sent its tensors to rank 0
    for sample in range(config.warmups + config.samples):
        assert objectio.list_names(config.checkpoint_id(sample)) == ["full.pt"]
    assert first.save is not None and first.save.planning.mean > 0  # the gather
    # Rank 0 needs the whole object; torch.load reads a few KiB of its zip records twice.
    load = first.load
    assert load is not None and load.read_bytes is not None and load.needed_bytes is not None
    assert load.needed_bytes <= load.read_bytes < 1.01 * load.needed_bytes


@pytest.mark.timeout(120)
def test_replicated_every_rank_holds_all_and_dcp_writes_each_tensor_once(tmp_path: Path) -> None:
    config = small_config(str(tmp_path / "ckpt"), strategy="replicated", padding_size=4,
                          keep_checkpoints=True)  # fmt: skip
    ranks = workers.run(config, tmp_path)
    assert [w.proc.returncode for w in ranks] == [0, 0], workers.logs(ranks)
    results = [w.result for w in ranks]
    total = sizes.total_bytes(config.layer_size, config.padding_size)
    stored = sum(
        sum(objectio.list_sizes(config.checkpoint_id(i)).values())
        for i in range(config.warmups + config.samples)
    )
    for r in results:
        assert r.verified is True and r.load_bytes == total
        assert r.resources is not None and r.resources.sent_bytes > 0  # DCP spreads the writes
    # Each rank's bytes, which its throughput is, are the tensor bytes it wrote, as every
    # checkpoint's metadata says (not the whole state it holds), and they add up to the state.
    for i in range(config.warmups + config.samples):
        assert _written_by_rank(config.checkpoint_id(i)) == {r.rank: r.bytes for r in results}
    assert sum(r.bytes for r in results) == total
    # Each tensor written once: the ranks' bytes sent add up to what storage holds.
    assert sum(r.resources.sent_bytes for r in results if r.resources) == stored


def _written_by_rank(checkpoint_id: str) -> dict[int, int]:
    """Tensor bytes in each rank's data file (``__{rank}_0.distcp``), from DCP's metadata."""
    metadata = FileSystemReader(checkpoint_id.removeprefix("file://")).read_metadata()
    written: dict[int, int] = {}
    for index, info in metadata.storage_data.items():
        entry = metadata.state_dict_metadata[index.fqn]
        assert isinstance(entry, TensorStorageMetadata)
        rank = int(info.relative_path.split("_")[2])
        nbytes = math.prod(entry.size) * entry.properties.dtype.itemsize
        written[rank] = written.get(rank, 0) + nbytes
    return written


def _run(tmp_path: Path, *argv: str) -> list[dict[str, object]]:
    out = tmp_path / "run.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "run", "--strategy", "sharded,full,replicated",
         "--world-size", "2", "--layer-size", "200", "--padding-size", "4", "--samples", "2",
         "--warmup", "0", *argv, "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=280, env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs: list[dict[str, object]] = json.loads(out.read_text())["runs"]
    return runs


def _check(runs: list[dict[str, object]], cells: int) -> None:
    assert len(runs) == cells
    for run in runs:
        assert run["verified"] is True, run["extra"]
        for key in ("load", "delete", "resources"):
            assert run[key] is not None, key
        load = run["load"]
        assert isinstance(load, dict) and load["read_amplification"] >= 1.0


@pytest.mark.timeout(300)
def test_run_every_strategy_on_file(tmp_path: Path) -> None:
    runs = _run(tmp_path, "--storage", str(tmp_path / "ckpt"))
    _check(runs, 3)
    strategies = [r["extra"]["settings"]["strategy"] for r in runs]  # type: ignore[index]
    assert strategies == ["sharded", "full", "replicated"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_every_strategy_on_the_emulator(tmp_path: Path) -> None:
    _check(_run(tmp_path, "--emulator", "--backend", "gcs,gcsfs"), 6)
