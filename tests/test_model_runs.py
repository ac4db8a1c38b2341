"""Model presets in real worker processes: DTensors over gloo, real DCP, every key verified."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from ckptbench.workload.contract.checkpoint import models
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.contract.results.rank import RankResult
from ckptbench.workload.contract.results.summaries import RunSummary
from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.storage import objects as objectio
from tests import workers
from tests.workers import small_config

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def _model_config(path: str, **overrides: object) -> WorkloadConfig:
    values: dict[str, object] = {
        "model": "llama3-debug",
        "world_size": 4,
        "sample_count": 1,
        "warmup_samples": 0,
        "collective_timeout_seconds": 120,
    }
    values.update(overrides)
    return small_config(path, **values)


@pytest.mark.parametrize("backend", ["file", "gcs", "gcsfs"])
def test_llama3_debug_with_adamw_on_four_ranks_saves_loads_and_verifies(
    backend: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    emulator_url = None
    path = str(tmp_path / "ckpt")
    if backend != "file":
        emulator: GcsEmulator = request.getfixturevalue("gcs_emulator")
        monkeypatch.setenv(EMULATOR_ENV, emulator.url)
        emulator_url = emulator.url
        path = f"gs://{request.getfixturevalue('gcs_bucket')}/bench"
    config = _model_config(path, backend=backend, keep_checkpoints=backend == "file")
    ranks = workers.run(config, tmp_path, emulator_url=emulator_url, timeout=240)
    assert [w.proc.returncode for w in ranks] == [0] * 4, workers.logs(ranks)

    spec = models.ModelSpec("llama3-debug")
    tensors = models.state_tensors(spec)
    for w in ranks:
        result = w.result
        assert result.error is None and result.verified is True, workers.logs(ranks)
        assert result.bytes == _rank_bytes_by_torch_chunk(tensors, 4, w.rank)
    assert "llama3-debug, optimizer adamw, dtype fp32" in ranks[0].stderr
    summary = RunSummary.model_validate_json(
        objectio.read_text(f"{config.results_path}/summary.json")
    )
    assert summary.verified is True
    assert summary.total_bytes == 12 * 6_163_712 + 4 * 57
    # What storage holds beside the payload: every rank's data, the .metadata, per-item overhead.
    stored = summary.extra["checkpoint"]
    assert stored["payload_bytes"] == summary.total_bytes
    assert stored["objects"] >= 5 and stored["metadata_bytes"] > 100_000
    # 684 pickled scalars and 57 steps are stored once, each a torch.save blob of over 1 KiB.
    assert stored["stored_bytes"] > stored["payload_bytes"] + stored["metadata_bytes"] + 684_000
    # ... and torchtitan's 4 shared small items once, and 4 ranks' own dataloader states.
    assert stored["stored_items"] == 3 * 57 * 4 + 57 + 684 + 4 + 4

    if backend == "file":
        _check_metadata(config, spec)


def _rank_bytes_by_torch_chunk(tensors: list[models.StateTensor], n: int, rank: int) -> int:
    total = 0
    for t in tensors:
        if not t.sharded:
            total += 4  # a 0-dim float32 step, on every rank
            continue
        pieces = torch.chunk(torch.empty(t.shape, device="meta"), n)
        if rank < len(pieces):
            total += pieces[rank].numel() * 4
    return total


def _check_metadata(config: WorkloadConfig, spec: models.ModelSpec) -> None:
    """The checkpoint DCP wrote is FSDP2-shaped, and our counts and estimate describe it."""
    checkpoint = Path(config.checkpoint_id(0))
    metadata = FileSystemReader(str(checkpoint)).read_metadata()
    sizes = models.model_sizes(spec, 4)
    assert len(metadata.state_dict_metadata) == sizes.tensors + sizes.byte_items + 4
    assert [f"dataloader.dp_rank_{r}" in metadata.state_dict_metadata for r in range(5)] == [
        True, True, True, True, False
    ]  # fmt: skip
    assert len(metadata.storage_data) == sizes.stored_items
    wq = metadata.state_dict_metadata["layers.0.attention.wq.weight"]
    assert isinstance(wq, TensorStorageMetadata)
    assert [tuple(c.offsets) for c in wq.chunks] == [(0, 0), (64, 0), (128, 0), (192, 0)]
    step = metadata.state_dict_metadata["optimizer.state.norm.weight.step"]
    assert isinstance(step, TensorStorageMetadata) and len(step.chunks) == 1
    real = (checkpoint / ".metadata").stat().st_size
    assert abs(sizes.metadata_bytes - real) <= 0.2 * real, (sizes.metadata_bytes, real)
    summary = RunSummary.model_validate_json(
        objectio.read_text(f"{config.results_path}/summary.json")
    )
    assert summary.extra["checkpoint"]["metadata_bytes"] == real


def test_a_corrupted_dtensor_shard_is_named_by_fqn_and_rank(tmp_path: Path) -> None:
    config = _model_config(str(tmp_path / "ckpt"), world_size=2, layers=1, optimizer="none")
    fqn = "layers.0.feed_forward.w1.weight"
    command = [*workers.WORKER[:1], "-m", "tests.workers", "corrupt", "1", fqn]
    ranks = workers.run(config, tmp_path, command=command, timeout=180)
    assert [w.proc.returncode for w in ranks] == [1, 1], workers.logs(ranks)
    bad = ranks[1].result
    assert bad.verified is False and bad.error is not None
    assert bad.error.startswith(f"VerificationError: {fqn} on rank 1: {fqn}: "), bad.error
    # Rank 1 owns rows 384..767 of the (768, 256) tensor: the flipped bit is in its half.
    assert "local elements differ, first at global element" in bad.error
    assert ranks[0].result.error == "PeerFailure: rank 1 failed during verify; stopping with it"


def test_a_run_that_cannot_fit_is_refused_before_anything_is_allocated(tmp_path: Path) -> None:
    # Only rank 1 of 2 is started: a check made after the rendezvous would wait there past the
    # test's timeout (the rendezvous deadline is longer), and never get to refuse.
    config = _model_config(
        str(tmp_path / "ckpt"),
        model="llama3-8b",
        world_size=2,
        memory_limit_bytes=2 * 1024**3,
        rendezvous_timeout_seconds=600,
    )
    ranks = workers.run(config, tmp_path, ranks=[1], timeout=150)
    (w,) = ranks
    assert w.proc.returncode == 2, workers.logs(ranks)
    result = RankResult.from_termination_message(w.termination_path.read_text())
    assert result.error is not None and result.error.startswith("MemoryRefused: a rank needs about")
    # 8B with AdamW on 2 ranks: 12 B/param / 2 is about 44.9 GiB for rank 0 alone.
    assert "shard or load template 44.8" in w.stderr or "shard or load template 44.9" in w.stderr
    assert "but has 2.00 GiB (CKPTBENCH_MEMORY_LIMIT_BYTES)" in w.stderr
    assert "fewer layers (CKPTBENCH_LAYERS), more ranks" in w.stderr
    assert "CKPTBENCH_MEMORY_CHECK=false" in w.stderr
    assert "rendezvous" not in w.stderr.lower()


def test_a_load_on_fewer_ranks_reshards_and_verifies(tmp_path: Path) -> None:
    # Saved by 4 ranks, loaded by the first 2: each reads the two saved chunks that cover its new
    # rows and narrows them; ranks 2 and 3 take part with nothing to read.
    config = _model_config(
        str(tmp_path / "ckpt"), layers=1, load_world_size=2, sample_count=2, keep_checkpoints=True
    )
    ranks = workers.run(config, tmp_path, timeout=240)
    assert [w.proc.returncode for w in ranks] == [0] * 4, workers.logs(ranks)
    for w in ranks:
        assert w.result.error is None and w.result.verified is True, workers.logs(ranks)
        assert w.result.load is not None and len(w.result.load.seconds or []) == 2
    # The second sample saved the full 4-rank state again: 4 chunks of every sharded tensor.
    metadata = FileSystemReader(config.checkpoint_id(1)).read_metadata()
    wq = metadata.state_dict_metadata["layers.0.attention.wq.weight"]
    assert isinstance(wq, TensorStorageMetadata) and len(wq.chunks) == 4


def test_a_resharded_load_that_reads_the_wrong_rows_fails(tmp_path: Path) -> None:
    # Verification checks the load world's rows: checking the save world's would pass nothing.
    config = _model_config(str(tmp_path / "ckpt"), world_size=2, layers=1, optimizer="none",
                           load_world_size=1)  # fmt: skip
    fqn = "layers.0.feed_forward.w1.weight"
    command = [*workers.WORKER[:1], "-m", "tests.workers", "corrupt", "1", fqn]
    ranks = workers.run(config, tmp_path, command=command, timeout=180)
    bad = ranks[0].result  # rank 0 alone loads both halves, rank 1's corrupted one among them
    assert bad.verified is False and bad.error is not None, workers.logs(ranks)
    assert bad.error.startswith(f"VerificationError: {fqn} on rank 0: {fqn}: "), bad.error
