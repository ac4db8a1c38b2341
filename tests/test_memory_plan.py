"""The memory estimate and the refusal message, pure and before anything is allocated."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ckptbench.workload.contract.checkpoint import memory_plan
from ckptbench.workload.contract.checkpoint.memory_plan import BASELINE_BYTES, RankLoad
from ckptbench.workload.contract.choices import Backend, SaveMode
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results.rank import RankResult
from ckptbench.workload.local.emulator import free_port
from ckptbench.workload.storage.gcs import objects, parts
from tests import workers
from tests.workers import ckptbench

GIB = 1024**3
MIB = 1024**2


def test_file_peak_is_baseline_plus_the_larger_of_saving_and_loading() -> None:
    sync = memory_plan.estimate(RankLoad(Backend.FILE, 10 * GIB, 100 * MIB, async_save=False))
    # Loading holds the template and two copies of the largest item; saving, the shard alone.
    assert sync.load_peak_bytes == BASELINE_BYTES[Backend.FILE] + 10 * GIB + 200 * MIB
    assert sync.save_peak_bytes == BASELINE_BYTES[Backend.FILE] + 10 * GIB
    assert sync.peak_bytes == sync.load_peak_bytes
    assync = memory_plan.estimate(RankLoad(Backend.FILE, 10 * GIB, 100 * MIB, async_save=True))
    # The staging copy is a second shard while saving; the template replaces the shard.
    assert assync.peak_bytes == assync.save_peak_bytes == BASELINE_BYTES[Backend.FILE] + 20 * GIB
    assert "async staging copy 10.00 GiB" in assync.breakdown()
    assert "staging" not in sync.breakdown()


def test_gcs_buffers_copied_tensors_in_parts_and_reads_in_slices() -> None:
    load = RankLoad(Backend.GCS, GIB, 64 * MIB, False, copied_bytes=500 * MIB, threads=4,
                    part_size_bytes=16 * MIB)  # fmt: skip
    est = memory_plan.estimate(load)
    assert est.save_buffer_bytes == (4 + 1) * 16 * MIB  # parts in flight bound the copies
    assert est.load_buffer_bytes == 4 * 2 * MIB  # two 1 MiB slices a thread, not the items
    few = memory_plan.estimate(RankLoad(Backend.GCS, GIB, 64 * MIB, False, copied_bytes=MIB))
    assert few.save_buffer_bytes == MIB  # no more than the bytes that are copied
    assert est.baseline_bytes == BASELINE_BYTES[Backend.GCS] > BASELINE_BYTES[Backend.FILE]


def test_gcsfs_holds_copies_of_the_item_it_writes() -> None:
    est = memory_plan.estimate(RankLoad(Backend.GCSFS, GIB, 40 * MIB, async_save=False))
    assert est.save_buffer_bytes == memory_plan.GCSFS_WRITE_COPIES * 40 * MIB
    assert est.load_buffer_bytes == 2 * 40 * MIB


def test_a_model_adds_its_runtime_and_metadata() -> None:
    plain = memory_plan.estimate(RankLoad(Backend.FILE, GIB, MIB, False))
    model = memory_plan.estimate(RankLoad(Backend.FILE, GIB, MIB, False, 5 * MIB, model=True))
    assert model.peak_bytes - plain.peak_bytes == memory_plan.MODEL_RUNTIME_BYTES + 5 * MIB


def test_the_constants_are_the_storage_layers() -> None:
    assert memory_plan.ZERO_COPY_MIN_BYTES == parts.ZERO_COPY_MIN_BYTES
    assert memory_plan.READ_SLICE_BYTES == objects._READ_SLICE


def test_only_tensors_below_the_zero_copy_size_are_copied() -> None:
    assert memory_plan.copied_bytes([MIB - 1, MIB, 2 * MIB, 10]) == MIB - 1 + 10
    small = WorkloadConfig(
        checkpoint_path="gs://bkt/x", world_size=2, layer_size=100, padding_size=8
    )
    big = small.model_copy(update={"layer_size": 1000})
    # 100 rows are 400 KB a tensor (copied into parts), 1000 rows 4 MB (sent from the tensor).
    assert small.memory_estimate().save_buffer_bytes == 4 * 400_000
    assert big.memory_estimate().save_buffer_bytes == 0


def test_refusal_gives_the_numbers_and_the_way_out() -> None:
    est = memory_plan.estimate(RankLoad(Backend.FILE, 10 * GIB, 0, async_save=False))
    assert memory_plan.refusal(est, est.peak_bytes, "limit", "use more ranks", "--force") is None
    text = memory_plan.refusal(
        est, est.peak_bytes - 1, "the pod's limit", "use more ranks", "--force"
    )
    assert text is not None
    assert "needs about 10.29 GiB" in text and "has 10.29 GiB (the pod's limit)" in text
    assert "use more ranks, or force the run with --force" in text


def test_the_reference_table_on_four_ranks_needs_over_18_gib_a_rank() -> None:
    config = WorkloadConfig(
        checkpoint_path="/tmp/x", backend="file", world_size=4, layer_size=100_000,
        padding_size=196,
    )  # fmt: skip
    est = config.memory_estimate()
    assert est.shard_bytes == 49 * 100_000 * 4000  # 49 tensors on rank 0
    assert est.load_buffer_bytes == 2 * 100_000 * 4000
    assert est.peak_bytes > 18.25 * GIB


def test_model_estimate_uses_the_largest_rank() -> None:
    config = WorkloadConfig(
        checkpoint_path="/tmp/x", backend="file", world_size=8, model="llama3-8b", rank=7
    )
    est = config.memory_estimate()
    assert round(est.shard_bytes / GIB, 2) == 11.22  # rank 0's, whatever this rank is
    assert est.load_buffer_bytes == 2 * 16032 * 4096 * 4  # ceil(128256 / 8) embedding rows


def test_a_models_metadata_counts_because_every_rank_reads_it() -> None:
    config = WorkloadConfig(
        checkpoint_path="/tmp/x", backend="file", world_size=512, model="llama3-405b"
    )
    est = config.memory_estimate()
    assert est.metadata_bytes > 300 * 10**6  # 1137 x 3 sharded tensors x 512 chunks
    assert est.load_peak_bytes == (
        est.baseline_bytes + est.slack_bytes + est.shard_bytes + est.load_buffer_bytes
        + est.metadata_bytes
    )  # fmt: skip
    assert ".metadata 3" in est.breakdown()


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("64Gi", 64 * GIB),
        ("512Mi", 512 * MIB),
        ("1G", 10**9),
        ("500M", 500 * 10**6),
        ("128974848", 128974848),
        ("1e9", 10**9),
        ("1.5Gi", 3 * GIB // 2),
        ("2k", 2000),
    ],
)
def test_kubernetes_quantities(text: str, value: int) -> None:
    assert memory_plan.parse_quantity(text) == value


def test_a_bad_quantity_is_named() -> None:
    with pytest.raises(ValueError, match="not a memory quantity: 'lots'"):
        memory_plan.parse_quantity("lots")


def test_an_async_save_of_dtensors_counts_the_deep_copies_left_in_the_heap() -> None:
    load = RankLoad(Backend.FILE, GIB, 300 * MIB, True, model=True, heap_bytes=200 * MIB)
    est = memory_plan.estimate(load)
    base = BASELINE_BYTES[Backend.FILE] + memory_plan.MODEL_RUNTIME_BYTES
    assert est.deep_copy_bytes == 200 * MIB
    assert est.peak_bytes == est.save_peak_bytes == base + 2 * GIB + 200 * MIB
    plain = memory_plan.estimate(RankLoad(Backend.FILE, GIB, 300 * MIB, True, heap_bytes=GIB))
    assert plain.deep_copy_bytes == 0  # plain tensors are staged into fresh ones, not deep-copied
    sync = memory_plan.estimate(RankLoad(Backend.FILE, GIB, 0, False, model=True, heap_bytes=GIB))
    assert sync.deep_copy_bytes == 0
    assert memory_plan.heap_bytes([32 * MIB - 1, 32 * MIB, 5]) == 32 * MIB + 4


def test_glibc_keeps_up_to_two_of_the_largest_heap_blocks_freed() -> None:
    assert memory_plan.largest_heap_item([32 * MIB, 40 * MIB, 5, 20 * MIB]) == 20 * MIB
    load = RankLoad(Backend.FILE, GIB, 20 * MIB, False, heap_item_bytes=20 * MIB)
    est = memory_plan.estimate(load)
    assert est.slack_bytes == 40 * MIB
    assert est.load_peak_bytes == BASELINE_BYTES[Backend.FILE] + 40 * MIB + GIB + 40 * MIB
    assert est.save_peak_bytes == BASELINE_BYTES[Backend.FILE] + 40 * MIB + GIB
    big = WorkloadConfig(checkpoint_path="/tmp/x", backend="file", world_size=2, layer_size=10000,
                         padding_size=8)  # fmt: skip
    assert big.memory_estimate().slack_bytes == 0  # 40 MB tensors: always mapped, unmapped
    # gcs reads into the template and writes from the tensors: no item buffers are freed.
    on_gcs = memory_plan.estimate(RankLoad(Backend.GCS, GIB, 20 * MIB, False, heap_item_bytes=MIB))
    assert on_gcs.slack_bytes == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc, ru_maxrss")
def test_ranks_peak_near_the_plan_and_hold_no_second_shard(tmp_path: Path) -> None:
    """Two ranks of 8 tensors of 31 MiB, three save/load cycles: freed shards must not pile up
    (under glibc's defaults alone a rank held a second shard, 855 MiB against 605)."""
    out = tmp_path / "run.json"
    argv = ["--layer-size", "8192", "--padding-size", "16", "--world-size", "2"]
    done = ckptbench(
        "run", *argv, "--storage", str(tmp_path / "ckpt"), "--samples", "2", "--json", str(out),
        timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    peaks = json.loads(out.read_text())["runs"][0]["extra"]["peak_rss_bytes"]
    config = WorkloadConfig(
        checkpoint_path=str(tmp_path), backend="file", world_size=2, layer_size=8192,
        padding_size=16,
    )  # fmt: skip
    estimate = config.memory_estimate().peak_bytes
    # The plan's 10% target is bench/bench_memory_plan.py's, measured over the presets: a fresh
    # virtualenv's ranks peaked 6-15% above this estimate where an older one's matched it. What
    # this test guards is the failure it names: a second shard held (+1 shard, 128 MiB here).
    shard = config.shard_bytes
    assert all(0.9 * estimate <= peak < estimate + shard for peak in peaks), (peaks, estimate)


def _fitting_sync_only(tmp_path: Path, **settings: object) -> WorkloadConfig:
    """A config whose memory limit fits a sync save and not a second (staging) shard."""
    base = {"checkpoint_path": str(tmp_path), "backend": "file", "world_size": 2,
            "layer_size": 50_000, "padding_size": 8}  # fmt: skip
    sync = WorkloadConfig.model_validate(base).memory_estimate()
    limit = sync.peak_bytes + sync.shard_bytes // 4
    return WorkloadConfig.model_validate({**base, "memory_limit_bytes": limit, **settings})


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"save_mode": "thread"}, "async staging copy"),
        ({"async_save": True}, "async staging copy"),
        (
            {"save_mode": "process", "stager": "default", "staging_shared_memory": True},
            "checkpointer process",
        ),
    ],
)
def test_the_staging_copy_and_the_checkpointer_count_in_the_plan(
    tmp_path: Path, settings: dict[str, object], named: str
) -> None:
    from ckptbench.workload.rank.worker import _memory_refusal

    assert _memory_refusal(_fitting_sync_only(tmp_path)) is None
    refused = _memory_refusal(_fitting_sync_only(tmp_path, **settings))
    assert refused is not None and named in refused


def test_the_process_checkpointer_is_a_second_interpreter_and_its_buffers() -> None:
    load = RankLoad(Backend.GCSFS, GIB, 40 * MIB, False, save_mode=SaveMode.PROCESS)
    est = memory_plan.estimate(load)
    assert est.checkpointer_bytes == BASELINE_BYTES[Backend.GCSFS] + est.save_buffer_bytes
    # Sent to it through shared memory: one more item while a staged tensor is moved there,
    # none when it was staged into shared memory.
    assert est.staging_bytes == GIB + 40 * MIB
    shared = memory_plan.estimate(
        RankLoad(Backend.GCSFS, GIB, 40 * MIB, False, save_mode=SaveMode.PROCESS,
                 staged_in_shared_memory=True)
    )  # fmt: skip
    assert shared.staging_bytes == GIB
    thread = memory_plan.estimate(RankLoad(Backend.GCSFS, GIB, 40 * MIB, False,
                                           save_mode=SaveMode.THREAD))  # fmt: skip
    assert thread.checkpointer_bytes == 0 and thread.staging_bytes == GIB
    assert est.peak_bytes - thread.peak_bytes == est.checkpointer_bytes + 40 * MIB


def test_the_training_step_counts_its_three_matrices(tmp_path: Path) -> None:
    plain = WorkloadConfig(checkpoint_path=str(tmp_path), backend="file", world_size=2)
    trained = plain.model_copy(update={"train_every": 10, "train_matrix": 2048})
    assert trained.memory_estimate().train_bytes == 3 * 2048 * 2048 * 4
    assert trained.memory_estimate().peak_bytes - plain.memory_estimate().peak_bytes == 48 * MIB


def test_a_rank_whose_staging_copy_cannot_fit_is_refused_before_it_allocates(
    tmp_path: Path,
) -> None:
    # Only rank 1 of 2 is started: a check made after the rendezvous would wait there.
    config = _fitting_sync_only(tmp_path / "ckpt", save_mode="thread", master_port=free_port(),
                                rendezvous_timeout_seconds=600)  # fmt: skip
    (w,) = workers.run(config, tmp_path, ranks=[1], timeout=150)
    assert w.proc.returncode == 2, workers.logs([w])
    result = RankResult.from_termination_message(w.termination_path.read_text())
    assert result.error is not None and result.error.startswith("MemoryRefused: a rank needs")
    assert "async staging copy" in result.error and "rendezvous" not in w.stderr.lower()


_READ: set[str] = set()


class _Recording(WorkloadConfig):
    """A config that notes every field read: what the memory plan depends on."""

    def __getattribute__(self, name: str) -> object:
        if name in WorkloadConfig.model_fields:
            _READ.add(name)
        return super().__getattribute__(name)


def test_the_plan_reads_exactly_the_settings_it_lists() -> None:
    # ckptbench sizes takes READS as its options: a setting read but not listed would be one the
    # estimate it prints cannot vary; one listed but never read, an option that changes nothing.
    read: set[str] = set()
    for settings in (
        {"backend": "file", "checkpoint_path": "/tmp/x"},
        {
            "model": "llama3-debug",
            "load_world_size": 1,
            "train_every": 2,
            "stager": "default",
            "async_save": True,
        },
    ):
        config = _Recording.model_validate({"checkpoint_path": "gs://bkt/p", **settings})
        _READ.clear()  # not what validating it read
        memory_plan.rank_load(config)
        read |= _READ
    assert read == set(memory_plan.READS)
