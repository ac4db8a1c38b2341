"""How the gcs writer and reader cut a shard into transfers: every thread gets work.

A shard of a few tensors smaller than the configured part size used to go out as one part
(the tensors gathered into the part buffer) and come back in one range per tensor, leaving most
threads idle; these tests pin the part and range sizes to the threads.
"""

from __future__ import annotations

import io
import itertools
import threading
import warnings
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

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
from ckptbench.workload.storage.gcs.blobs import BlobLayouts
from ckptbench.workload.storage.gcs.blobs import Item as _Item
from ckptbench.workload.storage.gcs.client import make_client
from ckptbench.workload.storage.gcs.download import ParallelReader
from ckptbench.workload.storage.gcs.objects import GcsObjects
from ckptbench.workload.storage.gcs.upload import CompositeUploadStream
from ckptbench.workload.storage.torch_seam import StorageInfo

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
    # 256 MB over 8 threads: 16 parts of 16 MB, not 8 of 32 MiB.
    assert spread_size(32 * MiB, 256_000_000, 8) == 16_000_000
    # Never above what was asked for, never below the floor unless asked.
    assert spread_size(32 * MiB, 10 * 1024 * MiB, 8) == 32 * MiB
    assert spread_size(32 * MiB, 3 * MiB, 8) == MIN_SPREAD_BYTES
    # A 16 MiB shard goes out in 8 MiB parts, not sixteen 1 MiB ones: on the bare emulator the
    # per-part cost made a 2-rank save slower than gcsfs's single upload.
    assert spread_size(32 * MiB, 16 * MiB, 8) == 8 * MiB
    assert spread_size(MiB // 2, 3 * MiB, 8) == MiB // 2
    assert part_size_for(32 * MiB, 256_000_000, 8) == 16_000_000


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
    # Four 16 MiB tensors, 32 MiB parts asked for, 4 threads: 8 parts of about 8 MiB.
    sd = {f"t{i}": torch.rand(4096, 1024) for i in range(4)}
    cid = f"gs://{gcs_bucket}/small"
    uploads: list[int] = []
    _spy(monkeypatch, "upload", uploads)
    dcp_save(sd, storage_writer=GcsStorageWriter(cid, threads=4, part_size_bytes=32 * MiB))
    data_parts = [n for n in uploads if n >= 4 * MiB]
    assert len(data_parts) >= 2 * 4, uploads
    assert max(uploads) <= 8.1 * MiB, uploads

    reads: list[int] = []
    _spy(monkeypatch, "read_range_into", reads)
    loaded = {k: torch.empty_like(v) for k, v in sd.items()}
    dcp_load(loaded, storage_reader=GcsStorageReader(cid, threads=4, part_size_bytes=32 * MiB))
    assert all(torch.equal(loaded[k], v) for k, v in sd.items())
    payload_reads = [n for n in reads if n >= 4 * MiB]
    assert len(payload_reads) >= 2 * 4, reads
    assert max(reads) <= 8.1 * MiB, reads


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


def _blob(t: torch.Tensor) -> memoryview:
    buf = io.BytesIO()
    torch.save(t, buf)
    return memoryview(buf.getvalue())


def test_blob_layouts_are_parsed_once_per_shape_and_dtype_and_never_confused() -> None:
    layouts = BlobLayouts()
    floats = [torch.rand(32, 100) for _ in range(3)]
    for t in floats:
        blob = _blob(t)
        record = layouts.parse(blob)
        assert record is not None and record.dtype == torch.float32
        payload = blob[record.data_offset : record.data_offset + record.data_length]
        assert bytes(payload) == t.numpy().tobytes()
    assert layouts.parsed == 1
    # Same length, other dtype: the pickled layout before the payload differs.
    ints = torch.arange(3200, dtype=torch.int32).reshape(32, 100)
    blob = _blob(ints)
    assert blob.nbytes == _blob(floats[0]).nbytes
    record = layouts.parse(blob)
    assert record is not None and record.dtype == torch.int32 and layouts.parsed == 2


def test_small_items_are_coalesced_into_as_few_reads_as_the_part_size_allows() -> None:
    # 100 back-to-back items of 100 bytes, parts of 625 bytes: 16 reads, not 17 (six items a
    # read, and a 17th for the last four, would leave all threads but one idle at the end).
    items = [
        _Item(cast(Any, None), StorageInfo("__0_0.distcp", i * 100, 100), None) for i in range(100)
    ]
    reader = ParallelReader(
        cast(Any, SimpleNamespace(checksums=False)),
        str,
        threads=8,
        part_size=625,
        transforms=cast(Any, None),
    )
    groups = reader._coalesce(items)
    assert len(groups) <= 16, [len(g) for g in groups]
    assert [i for g in groups for i in g] == items
    # A gap starts a new read.
    gap = [*items[:3], _Item(cast(Any, None), StorageInfo("__0_0.distcp", 5000, 100), None)]
    assert [len(g) for g in reader._coalesce(gap)] == [3, 1]


def test_many_small_items_cost_a_request_per_part_and_a_buffer_append_per_write(
    client: storage.Client, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2,000 tensors of 64 bytes: torch.save hands the stream dozens of writes per tensor (zip
    # records, padding, payload). All of them fit in one 1 MiB part: a handful of requests, and
    # almost every write only appended to the part buffer, never reaching the slow path that
    # decides about parts (an equivalent of each write on the request count, but its CPU cost).
    sd = {f"t{i}": torch.arange(i, i + 16, dtype=torch.float32) for i in range(2000)}
    uploads: list[int] = []
    _spy(monkeypatch, "upload", uploads)
    calls = {"write": 0, "slow": 0}
    write, slow = CompositeUploadStream.write, CompositeUploadStream._write

    def counted_write(self: CompositeUploadStream, b: Any) -> int:
        calls["write"] += 1
        return write(self, b)

    def counted_slow(self: CompositeUploadStream, b: Any) -> int:
        calls["slow"] += 1
        return slow(self, b)

    monkeypatch.setattr(CompositeUploadStream, "write", counted_write)
    monkeypatch.setattr(CompositeUploadStream, "_write", counted_slow)
    cid = f"gs://{gcs_bucket}/tiny"
    dcp_save(sd, storage_writer=GcsStorageWriter(cid, threads=4, part_size_bytes=MiB))
    assert calls["write"] > 10 * len(sd), calls  # the premise: many writes per item
    assert 1 <= len(uploads) <= 4, uploads  # the data object's parts, not one per item
    # Only a stream's first write and the writes that fill a part take the slow path.
    assert calls["slow"] <= len(uploads) + 2, calls
    loaded = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp_load(loaded, storage_reader=GcsStorageReader(cid, threads=4, part_size_bytes=MiB))
    assert all(torch.equal(loaded[k], v) for k, v in sd.items())


def test_a_payload_goes_as_the_fewest_even_parts_not_whole_parts_and_a_straggler(
    client: storage.Client, gcs_bucket: str
) -> None:
    # 2.5 parts' worth: three parts of 0.83, which finish together on three threads, not two
    # whole parts and a half one; the zip records before it go alone (compose takes any size).
    objects = GcsObjects(client, gcs_bucket)
    payload = bytes(range(256)) * (10 * 1024)  # 2.5 MiB
    stream = CompositeUploadStream(
        objects, "even", threads=4, part_size=MiB, keepalive=lambda view: payload
    )
    stream.write(b"PK" + bytes(30))
    stream.write(payload)
    stream.close()
    bounds = [i * len(payload) // 3 for i in range(4)]  # sizes differ by a byte at most
    assert stream.part_sizes == [32, *(hi - lo for lo, hi in itertools.pairwise(bounds))]
    assert max(stream.part_sizes[1:]) - min(stream.part_sizes[1:]) <= 1
    assert objects.read_all("even") == b"PK" + bytes(30) + payload
