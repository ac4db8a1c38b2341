"""The gcs backend's DCP writer and reader against a real fake-gcs-server process."""

from __future__ import annotations

import dataclasses
import io
import warnings
from pathlib import Path
from typing import IO, Any, cast

import pytest
import torch
from google.cloud import storage
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.storage.gcs import backend
from ckptbench.workload.storage.gcs.backend import (
    GcsFileSystem,
    GcsStorageReader,
    GcsStorageWriter,
    PinnedTensors,
    Upload,
    part_size_for,
)
from ckptbench.workload.storage.gcs.blobs import BlobLayouts, tensor_memory
from ckptbench.workload.storage.gcs.objects import GcsObjects
from ckptbench.workload.storage.gcs.upload import CompositeUploadStream, first_level_groups
from ckptbench.workload.storage.retry import GcsHttpError, RetryPolicy
from ckptbench.workload.storage.torch_seam import parse_tensor_blob
from tests.fault_proxy import FaultProxy, Rule

MiB = 1 << 20
FAST_RETRY = RetryPolicy(attempts=2, base_delay=0.0, max_delay=0.0)

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("quiet_dcp")]


def state(seed: int = 0) -> dict[str, Any]:
    """Tensors of a few MiB crossing 1 MiB part boundaries, small ones, a non-contiguous
    one above the part size (stored as a view: the reader's generic path) and plain bytes."""
    gen = torch.Generator().manual_seed(seed)
    sd: dict[str, Any] = {
        f"big_{i}": torch.rand((rows, 1000), generator=gen)
        for i, rows in enumerate([786, 1311, 524, 2621, 1049, 700, 1500])
    }
    sd["tiny_a"] = torch.arange(7, dtype=torch.float32)
    sd["tiny_b"] = torch.rand((3, 5), generator=gen)
    sd["transposed"] = torch.rand((600, 700), generator=gen).t()
    sd["ints"] = torch.arange(300_000, dtype=torch.int64)
    sd["extra"] = {"step": 7, "name": "ckpt"}
    return sd


def template(sd: dict[str, Any]) -> dict[str, Any]:
    return {
        k: torch.empty_like(v, memory_format=torch.contiguous_format)
        if isinstance(v, torch.Tensor)
        else {"step": 0, "name": ""}
        for k, v in sd.items()
    }


def assert_same(expected: dict[str, Any], loaded: dict[str, Any]) -> None:
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(loaded[key], value), key
        else:
            assert loaded[key] == value, key


def names(client: storage.Client, bucket: str) -> list[str]:
    return sorted(b.name for b in client.list_blobs(bucket))


def saved(sd: dict[str, Any], bucket: str, folder: str, threads: int = 2) -> str:
    """Saves ``sd`` with our writer under ``folder`` in 1 MiB parts; returns the checkpoint id."""
    cid = f"gs://{bucket}/{folder}/ckpt.ckpt"
    writer = GcsStorageWriter(cid, project=None, threads=threads, part_size_bytes=MiB)
    dcp_save(sd, storage_writer=writer)
    return cid


def our_reader(cid: str, threads: int = 2) -> GcsStorageReader:
    return GcsStorageReader(cid, project=None, threads=threads, part_size_bytes=MiB)


def test_round_trip_with_hierarchical_compose(
    gcs_client: storage.Client, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    composes: list[tuple[str, int]] = []
    original = GcsObjects.compose

    def spy(self: GcsObjects, dest: str, sources: list[str], **kwargs: Any) -> None:
        composes.append((dest, len(sources)))
        original(self, dest, sources, **kwargs)

    monkeypatch.setattr(GcsObjects, "compose", spy)
    sd = state()
    shard = sum(v.numel() * v.element_size() for v in sd.values() if isinstance(v, torch.Tensor))
    assert shard > 33 * MiB  # more parts than one compose takes
    cid = f"gs://{gcs_bucket}/run/ckpt_0.ckpt"
    dcp_save(sd, storage_writer=GcsStorageWriter(cid, project=None, threads=4, part_size_bytes=MiB))

    # Same layout as DCP's file writers, and no temporary part left behind.
    assert names(gcs_client, gcs_bucket) == [
        "run/ckpt_0.ckpt/.metadata",
        "run/ckpt_0.ckpt/__0_0.distcp",
    ]
    final = [c for c in composes if c[0] == "run/ckpt_0.ckpt/__0_0.distcp"]
    assert len(final) == 1 and final[0][1] <= 32
    assert len(composes) > 1, "expected a first level of composes before the final one"
    assert all(n <= 32 for _, n in composes)

    loaded = template(sd)
    dcp_load(loaded, storage_reader=our_reader(cid, threads=4))
    assert_same(sd, loaded)


def test_small_shard_is_one_simple_upload(
    gcs_client: storage.Client, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_compose(*_: object) -> None:
        raise AssertionError("a shard smaller than one part must not be composed")

    monkeypatch.setattr(GcsObjects, "compose", no_compose)
    sd = {"a": torch.arange(1000, dtype=torch.float32), "b": torch.ones(20, 30)}
    cid = saved(sd, gcs_bucket, "small")
    loaded = template(sd)
    dcp_load(loaded, storage_reader=our_reader(cid))
    assert_same(sd, loaded)


def test_checkpoints_interoperate_with_dcp_filesystem_reader_and_writer(
    gcs_client: storage.Client, gcs_bucket: str, tmp_path: Path
) -> None:
    sd = state(seed=1)
    objects = GcsObjects(gcs_client, gcs_bucket)

    # Ours -> DCP's FileSystemReader: download the objects as files, load them with DCP.
    saved(sd, gcs_bucket, "ours", threads=3)
    local = tmp_path / "ours"
    local.mkdir()
    for name in (".metadata", "__0_0.distcp"):
        (local / name).write_bytes(objects.read_all(f"ours/ckpt.ckpt/{name}"))
    from_files = template(sd)
    dcp_load(from_files, storage_reader=FileSystemReader(local))
    assert_same(sd, from_files)

    # DCP's FileSystemWriter -> ours: upload its files, load them with our reader.
    theirs = tmp_path / "theirs"
    dcp_save(sd, storage_writer=FileSystemWriter(theirs))
    for path in theirs.iterdir():
        objects.upload(f"theirs/ckpt.ckpt/{path.name}", path.read_bytes())
    from_objects = template(sd)
    dcp_load(
        from_objects,
        storage_reader=GcsStorageReader(
            f"gs://{gcs_bucket}/theirs/ckpt.ckpt", project=None, threads=3, part_size_bytes=MiB
        ),
    )
    assert_same(sd, from_objects)


def test_failed_part_fails_the_save_and_cleans_up(
    gcs_client: storage.Client, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = GcsObjects.upload
    calls = {"n": 0}

    def failing(self: GcsObjects, name: str, data: Any) -> int | None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise GcsHttpError(f"upload {self.url(name)}: HTTP 403: injected", 403)
        return original(self, name, data)

    monkeypatch.setattr(GcsObjects, "upload", failing)
    cid = f"gs://{gcs_bucket}/fail/ckpt.ckpt"
    writer = GcsStorageWriter(cid, project=None, threads=4, part_size_bytes=MiB)
    with pytest.raises(CheckpointException, match=r"HTTP 403: injected") as info:
        dcp_save(state(), storage_writer=writer)
    assert "fail/ckpt.ckpt/__0_0.distcp.parts/" in str(info.value)
    # Neither the data object nor any part nor the metadata remains.
    assert names(gcs_client, gcs_bucket) == []


def test_missing_bucket_fails_the_save_naming_the_object(
    gcs_client: storage.Client, gcs_bucket: str
) -> None:
    cid = f"gs://{gcs_bucket}-absent/x/ckpt.ckpt"
    writer = GcsStorageWriter(
        cid, project=None, threads=2, part_size_bytes=MiB, retry_policy=FAST_RETRY
    )
    with pytest.raises(CheckpointException, match=rf"gs://{gcs_bucket}-absent/x/ckpt.ckpt/"):
        dcp_save(state(), storage_writer=writer)


def test_missing_data_object_fails_the_load_naming_it(
    gcs_client: storage.Client, gcs_bucket: str
) -> None:
    sd = state(seed=2)
    cid = saved(sd, gcs_bucket, "gone")
    gcs_client.bucket(gcs_bucket).blob("gone/ckpt.ckpt/__0_0.distcp").delete()
    reader = our_reader(cid)
    with pytest.raises(
        CheckpointException, match=rf"gs://{gcs_bucket}/gone/ckpt.ckpt/__0_0.distcp"
    ):
        dcp_load(template(sd), storage_reader=reader)


def test_missing_metadata_fails_the_load_naming_it(
    gcs_client: storage.Client, gcs_bucket: str
) -> None:
    reader = GcsStorageReader(
        f"gs://{gcs_bucket}/none/ckpt.ckpt",
        project=None,
        threads=2,
        part_size_bytes=MiB,
        retry_policy=FAST_RETRY,
    )
    with pytest.raises(CheckpointException, match=rf"gs://{gcs_bucket}/none/ckpt.ckpt/.metadata"):
        dcp_load({"a": torch.empty(3)}, storage_reader=reader)


def test_checkpoint_id_validation() -> None:
    assert GcsStorageWriter.validate_checkpoint_id("gs://bucket/a/ckpt_1.ckpt")
    assert GcsStorageReader.validate_checkpoint_id("gs://bucket/a")
    for bad in ("/tmp/ckpt", "file:///tmp/ckpt", "s3://b/x", "gs:///x", Path("/tmp/x")):
        assert not GcsStorageWriter.validate_checkpoint_id(bad)
        assert not GcsStorageReader.validate_checkpoint_id(bad)
    with pytest.raises(ValueError, match="gs://bucket/prefix"):
        GcsStorageWriter("/tmp/ckpt", project=None, threads=1, part_size_bytes=MiB, client=object())


def test_storage_meta_names_the_checkpoint(gcs_client: storage.Client) -> None:
    writer = GcsStorageWriter(
        "gs://b-meta/a/ckpt.ckpt", project=None, threads=1, part_size_bytes=MiB
    )
    meta = writer.storage_meta()
    assert meta is not None and meta.checkpoint_id == "gs://b-meta/a/ckpt.ckpt"
    assert meta.save_id


def test_an_object_is_written_only_with_what_its_writer_declared(
    gcs_client: storage.Client, gcs_bucket: str
) -> None:
    fs = GcsFileSystem(client=gcs_client, threads=2, part_size_bytes=MiB)
    path = f"gs://{gcs_bucket}/declared/__0_0.distcp"
    with pytest.raises(RuntimeError, match=r"outside uploading\(\): .* how many bytes"):
        fs.create_stream(path, "wb").__enter__()
    with fs.uploading(Upload(expected_bytes=3 * MiB)):
        with fs.create_stream(path, "wb") as stream:
            stream.write(bytes(3 * MiB))
        with pytest.raises(RuntimeError, match="another save is writing"):
            fs.uploading(Upload(expected_bytes=1)).__enter__()
    assert names(gcs_client, gcs_bucket) == ["declared/__0_0.distcp"]
    with pytest.raises(RuntimeError, match="outside uploading"):  # the block's end clears it
        fs.create_stream(path, "wb").__enter__()


def test_the_writer_declares_each_objects_size_and_pins(
    gcs_client: storage.Client, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: dict[str, dict[str, Any]] = {}

    class Recording(CompositeUploadStream):
        def __init__(self, objects: GcsObjects, name: str, **options: Any) -> None:
            opened[name.rsplit("/", 1)[1]] = options
            super().__init__(objects, name, **options)

    monkeypatch.setattr(backend, "CompositeUploadStream", Recording)
    sd = {"a": torch.rand(500, 1000), "b": torch.rand(300, 1000)}
    saved(sd, gcs_bucket, "declared")
    payload = 800 * 1000 * 4
    data = opened["__0_0.distcp"]
    # The payload and under 4 KiB of torch.save's framing per tensor.
    assert payload < data["expected_bytes"] <= payload + 2 * 4096
    assert data["keepalive"] is not None
    metadata = opened[".metadata.tmp"]
    assert (metadata["expected_bytes"], metadata["keepalive"]) == (0, None)


def test_blob_parser_finds_the_payload_and_rejects_views() -> None:
    t = torch.rand(300, 500)
    buf = io.BytesIO()
    torch.save(t, buf)
    blob = buf.getvalue()
    rec = parse_tensor_blob(blob[:16384], blob[-16384:], len(blob))
    assert rec is not None and rec.is_dense()
    assert (rec.dtype, rec.size) == (torch.float32, (300, 500))
    payload = blob[rec.data_offset : rec.data_offset + rec.data_length]
    assert payload == bytes(tensor_memory(t))

    view = io.BytesIO()
    torch.save(t.t(), view)
    v = view.getvalue()
    rec_t = parse_tensor_blob(v[:16384], v[-16384:], len(v))
    assert rec_t is not None and not rec_t.is_dense()

    assert parse_tensor_blob(b"not a zip" * 10, b"", 90) is None


def test_part_size_and_compose_grouping() -> None:
    # 16 tensors of just under a part: a small framing part before each payload part.
    sizes = [1000, 32 * MiB - 100] * 16 + [600]
    groups = first_level_groups(sizes)
    assert groups is not None and len(groups) <= 32
    assert [i for lo, hi in groups for i in range(lo, hi)] == list(range(len(sizes)))
    merged = sum(sum(sizes[lo:hi]) for lo, hi in groups if hi - lo > 1)
    assert merged < 2 * 32 * MiB  # the cheap merges, not a copy of everything
    assert first_level_groups([MiB] * 32) is None
    assert part_size_for(32 * MiB, 10 * 1024 * MiB, 8) == 32 * MiB
    # 18.25 GiB at 1 MiB parts would pass GCS's 1024-component limit: the part grows.
    grown = part_size_for(MiB, 19_600_000_000)
    assert grown > MiB and -(-19_600_000_000 // grown) <= 1024 - 2
    # Refused up front, with the numbers, when no allowed part size fits.
    with pytest.raises(ValueError, match=r"need parts of \d+ bytes .* at most 5368709120"):
        part_size_for(MiB, 6 * 1024**4)


def test_pinned_tensor_owns_the_payload_torch_save_writes() -> None:
    pinned, other = torch.rand(600, 1000), torch.rand(600, 1000)
    pins = PinnedTensors()
    pins.add(pinned)
    owners: list[object | None] = []

    class Probe(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b: Any) -> int:
            view = memoryview(b)
            if view.nbytes >= MiB:
                owners.append(pins.owner(view))
            return view.nbytes

    torch.save(pinned, cast(IO[bytes], Probe()))
    torch.save(other, cast(IO[bytes], Probe()))
    assert owners == [pinned, None]
    assert pins.owner(memoryview(b"x" * 10)) is None


def test_plain_tensors_take_the_fast_path_and_no_deprecation_warning_is_shown(
    gcs_client: storage.Client, gcs_bucket: str
) -> None:
    sd = state(seed=3)
    cid = saved(sd, gcs_bucket, "paths")
    reader = our_reader(cid)
    loaded = template(sd)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dcp_load(loaded, storage_reader=reader)
    assert_same(sd, loaded)
    shown = [str(w.message) for w in caught]
    assert not [m for m in shown if "TypedStorage" in m], shown
    paths = reader.gcs.read_paths
    # The eight plain tensors over 1 MiB go straight into their destination; the two small
    # ones are copied out of a coalesced read; only the transposed view needs torch.load.
    # And the one data object, read whole, was checked against its stored crc32c.
    assert paths.as_dict() == {
        "direct": 8,
        "scattered": 0,
        "copied": 2,
        "generic": 1,
        "bytes": 2,
        "checked": 1,
        "unchecked": 0,
        "mismatched": 0,
    }


def test_a_corrupted_blob_names_the_object_and_never_suggests_weights_only_false(
    gcs_client: storage.Client, gcs_bucket: str
) -> None:
    sd = {"view": torch.rand((60, 70)).t()}  # stored as a view: the torch.load path
    cid = saved(sd, gcs_bucket, "bad")
    blob = gcs_client.bucket(gcs_bucket).blob("bad/ckpt.ckpt/__0_0.distcp")
    data = bytearray(blob.download_as_bytes())
    data[40:80] = b"\xff" * 40  # inside the zip's first records
    blob.upload_from_string(bytes(data))
    reader = our_reader(cid)
    with pytest.raises(CheckpointException) as info:
        dcp_load(template(sd), storage_reader=reader)
    text = str(info.value)
    assert f"gs://{gcs_bucket}/bad/ckpt.ckpt/__0_0.distcp" in text
    assert "corrupted" in text
    assert "weights_only" not in text


def _same_shape_state() -> dict[str, Any]:
    gen = torch.Generator().manual_seed(11)
    return {f"w{i:02d}": torch.rand((100, 1000), generator=gen) for i in range(24)}


def test_small_tensors_of_one_shape_land_straight_in_their_memory(
    gcs_client: storage.Client, gcs_bucket: str
) -> None:
    # 24 tensors of 400 KB, below the direct path's 1 MiB: read coalesced, yet each payload
    # goes into its tensor from the response, not through a buffer copy.
    sd = _same_shape_state()
    cid = saved(sd, gcs_bucket, "scatter")
    reader = our_reader(cid)
    loaded = template(sd)
    dcp_load(loaded, storage_reader=reader)
    assert_same(sd, loaded)
    paths = reader.gcs.read_paths.as_dict()
    assert (paths["scattered"], paths["copied"], paths["generic"]) == (24, 0, 0)
    assert (paths["checked"], paths["mismatched"]) == (1, 0)


def test_a_blob_unlike_its_predicted_layout_is_read_again_the_buffered_way(
    gcs_client: storage.Client, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A prediction 64 bytes off: the payload would land shifted. The bytes read before it are
    # not the predicted ones, so the item is read again into a buffer and copied out.
    sd = _same_shape_state()
    cid = saved(sd, gcs_bucket, "mispredicted")
    real = BlobLayouts.predict

    def off_by_64(self: BlobLayouts, item: Any) -> tuple[bytes, Any] | None:
        known = real(self, item)
        if known is None:
            return None
        prefix, record = known
        shifted = dataclasses.replace(record, data_offset=record.data_offset + 64)
        return prefix + bytes(64), shifted

    monkeypatch.setattr(BlobLayouts, "predict", off_by_64)
    reader = our_reader(cid)
    loaded = template(sd)
    dcp_load(loaded, storage_reader=reader)
    assert_same(sd, loaded)
    paths = reader.gcs.read_paths.as_dict()
    assert (paths["scattered"], paths["copied"]) == (0, 24)
    assert (paths["checked"], paths["mismatched"]) == (1, 0)


def test_scattered_reads_cut_short_resume_from_the_byte_reached(
    gcs_client: storage.Client,
    gcs_bucket: str,
    gcs_emulator: GcsEmulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sd = _same_shape_state()
    cid = saved(sd, gcs_bucket, "scatter-reset")
    # After the layout read (let through), three coalesced reads (about 3.2 MB each, so a whole
    # 1 MiB slice has arrived when the connection drops halfway) lose their connection mid-body.
    layout_read = Rule("delay", "GET", ".distcp?alt=media", times=1)
    rule = Rule("reset_response", "GET", ".distcp?alt=media", times=3)
    proxy = FaultProxy(gcs_emulator.url, [layout_read, rule], seed=3)
    loaded = template(sd)
    with proxy.running():
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        reader = GcsStorageReader(cid, project=None, threads=2, part_size_bytes=4 * MiB)
        dcp_load(loaded, storage_reader=reader)
    assert (layout_read.fired, rule.fired) == (1, 3)
    assert_same(sd, loaded)
    paths = reader.gcs.read_paths.as_dict()
    assert (paths["scattered"], paths["checked"]) == (24, 1)
