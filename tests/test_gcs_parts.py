"""How the gcs writer and reader cut a shard into transfers: every thread gets work.

A shard of a few tensors smaller than the configured part size used to go out as one part
(the tensors gathered into the part buffer) and come back in one range per tensor, leaving most
threads idle; these tests pin the part and range sizes to the threads.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from google.cloud import storage
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.storage.gcs.backend import (
    MIN_SPREAD_BYTES,
    GcsStorageReader,
    GcsStorageWriter,
    part_size_for,
    spread_size,
)
from ckptbench.workload.storage.gcs.client import make_client
from ckptbench.workload.storage.gcs.objects import GcsObjects
from ckptbench.workload.storage.gcs.upload import CompositeUploadStream

MiB = 1 << 20
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


@pytest.fixture
def client(gcs_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch) -> storage.Client:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.url)
    return make_client(pool_size=8)


def test_spread_size_gives_each_thread_two_transfers_within_the_bounds() -> None:
    # 64 MB over 8 threads: 16 parts of 4 MB, not 2 of 32 MiB.
    assert spread_size(32 * MiB, 64_000_000, 8) == 4_000_000
    # Never above what was asked for, never below the floor unless asked.
    assert spread_size(32 * MiB, 10 * 1024 * MiB, 8) == 32 * MiB
    assert spread_size(32 * MiB, 3 * MiB, 8) == MIN_SPREAD_BYTES
    assert spread_size(MiB // 2, 3 * MiB, 8) == MiB // 2
    assert part_size_for(32 * MiB, 64_000_000, 8) == 4_000_000


def _spy(monkeypatch: pytest.MonkeyPatch, method: str, sizes: list[int]) -> None:
    original = getattr(GcsObjects, method)
    lock = threading.Lock()

    def spy(self: GcsObjects, name: str, *args: Any, **kwargs: Any) -> Any:
        if ".distcp" in name:
            data = args[-1]
            with lock:
                sizes.append(memoryview(data).nbytes)
        return original(self, name, *args, **kwargs)

    monkeypatch.setattr(GcsObjects, method, spy)


def test_a_small_shard_is_cut_into_parts_and_ranges_for_every_thread(
    client: storage.Client, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four 2 MiB tensors, 32 MiB parts asked for, 4 threads: 8 parts of about 1 MiB.
    sd = {f"t{i}": torch.rand(512, 1024) for i in range(4)}
    cid = f"gs://{gcs_bucket}/small"
    uploads: list[int] = []
    _spy(monkeypatch, "upload", uploads)
    dcp_save(sd, storage_writer=GcsStorageWriter(cid, threads=4, part_size_bytes=32 * MiB))
    data_parts = [n for n in uploads if n >= MiB // 2]
    assert len(data_parts) >= 2 * 4, uploads
    assert max(uploads) <= 1.1 * MiB, uploads

    reads: list[int] = []
    _spy(monkeypatch, "read_range_into", reads)
    loaded = {k: torch.empty_like(v) for k, v in sd.items()}
    dcp_load(loaded, storage_reader=GcsStorageReader(cid, threads=4, part_size_bytes=32 * MiB))
    assert all(torch.equal(loaded[k], v) for k, v in sd.items())
    payload_reads = [n for n in reads if n >= MiB // 2]
    assert len(payload_reads) >= 2 * 4, reads
    assert max(reads) <= 1.1 * MiB, reads


def test_tensors_smaller_than_a_part_go_out_whole_and_uncopied(
    client: storage.Client, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 8 tensors of 1.5 MiB on 2 threads: parts of 3 MiB, yet each payload is its own part
    # (sent from the tensor's memory) instead of two tensors copied together into one.
    sd = {f"t{i}": torch.rand(384, 1024) for i in range(8)}
    uploads: list[int] = []
    _spy(monkeypatch, "upload", uploads)
    dcp_save(
        sd,
        storage_writer=GcsStorageWriter(
            f"gs://{gcs_bucket}/whole", threads=2, part_size_bytes=32 * MiB
        ),
    )
    assert sorted(n for n in uploads if n >= MiB) == [384 * 1024 * 4] * 8, uploads


def test_thread_counts_and_part_sizes_below_one_are_refused_by_name(
    client: storage.Client, gcs_bucket: str
) -> None:
    with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
        GcsStorageWriter(f"gs://{gcs_bucket}/x", threads=0, client=client)
    with pytest.raises(ValueError, match="part_size_bytes must be >= 1, got 0"):
        GcsStorageReader(f"gs://{gcs_bucket}/x", part_size_bytes=0, client=client)
    with pytest.raises(ValueError, match="part_size must be >= 1, got 0"):
        CompositeUploadStream(GcsObjects(client, gcs_bucket), "x", threads=1, part_size=0)
