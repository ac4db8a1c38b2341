"""DCP StorageWriter and StorageReader on google-cloud-storage, built for throughput.

They reuse DCP's own file layout and planning (``FileSystemWriter`` / ``FileSystemReader``) so a
checkpoint is object for object what DCP's file and fsspec writers produce: one
``__{rank}_0.distcp`` per rank holding its tensors back to back as ``torch.save`` blobs, and a
``.metadata`` written by the coordinator. Only the byte movement differs: a rank's object is
uploaded as parallel parts, assembled by GCS's XML multipart upload (:mod:`.multipart`) or
composed from temporary objects (:mod:`.upload`), and loads are parallel ranged reads into the
destination tensors (:mod:`.download`).
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack, cast

import torch
from google.cloud import storage
from torch.distributed.checkpoint.filesystem import (
    FileSystemBase,
    FileSystemReader,
    FileSystemWriter,
)
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import (
    LoadPlan,
    LoadPlanner,
    SavePlan,
    SavePlanner,
    WriteItem,
)
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from ckptbench.workload.contract.choices import UploadScheme
from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.storage import torch_seam
from ckptbench.workload.storage.gcs.client import make_client, split_gs_url
from ckptbench.workload.storage.gcs.download import ParallelReader, ReadPaths
from ckptbench.workload.storage.gcs.multipart import (
    MAX_PARTS,
    MIN_PART_BYTES,
    RESERVED_PARTS,
    MultipartUploadStream,
)
from ckptbench.workload.storage.gcs.objects import GcsObjects
from ckptbench.workload.storage.gcs.parts import PartedUploadStream, require_positive
from ckptbench.workload.storage.gcs.upload import (
    MAX_COMPONENTS,
    RESERVED_COMPONENTS,
    CompositeUploadStream,
)
from ckptbench.workload.storage.retry import DEFAULT_POLICY, DISCARD_SECONDS, RetryPolicy

DEFAULT_THREADS = 8
DEFAULT_PART_SIZE = 32 * 1024 * 1024
# The largest part the configuration allows (parts are buffered in memory when gathered).
MAX_PART_BYTES = 5 * 1024**3


def is_gs_url(checkpoint_id: str | os.PathLike[str]) -> bool:
    if not isinstance(checkpoint_id, str):
        return False
    try:
        split_gs_url(checkpoint_id)
    except ValueError:
        return False
    return True


# Parts are cut no smaller than this when a small shard is spread over the threads: below it the
# per-request cost (a round trip, headers, a crc32c, and on a composite upload one more source for
# compose) starts to show. With 1 MiB, a 2-rank save of 16 MiB shards on the bare emulator ran at
# 0.72 x gcsfs; with 8 MiB at 1.23 x (medians of 3 interleaved rounds, docs/storage.md).
MIN_SPREAD_BYTES = 8 * 1024 * 1024
# Parts per thread a shard is cut into when it is small: more than one, so that the threads which
# finish first pick up another part instead of idling while the last parts trickle in.
PARTS_PER_THREAD = 2


def spread_size(requested: int, total_bytes: int, threads: int) -> int:
    """The transfer unit for ``total_bytes`` moved by ``threads`` workers: ``requested`` at
    most, smaller when that would leave threads idle (a 64 MB shard in 32 MiB parts keeps two
    of eight threads busy), but not below :data:`MIN_SPREAD_BYTES` unless ``requested`` is."""
    spread = -(-total_bytes // (threads * PARTS_PER_THREAD))
    return min(requested, max(MIN_SPREAD_BYTES, spread))


def part_size_for(
    requested: int,
    expected_bytes: int,
    threads: int = 1,
    scheme: UploadScheme = UploadScheme.COMPOSE,
) -> int:
    """The upload part size for a stream of ``expected_bytes``: :func:`spread_size`, raised if
    needed so that the full parts stay within the scheme's part limit (a composite object's
    1,024 components, a multipart upload's 10,000 parts), and for a multipart upload to GCS's
    5 MiB minimum part. Short parts (a tensor's tail, the zip framing between tensors) are sent
    only while the budget allows and gathered otherwise, so the number of tensors does not
    matter. Refused, with the numbers, when even the largest part size allowed would not do."""
    if scheme is UploadScheme.MULTIPART:
        limit, what, floor = MAX_PARTS, "part limit of a multipart upload", MIN_PART_BYTES
        room = MAX_PARTS - RESERVED_PARTS - 1
    else:
        limit, what, floor = MAX_COMPONENTS, "component limit of a composite object", 1
        room = MAX_COMPONENTS - RESERVED_COMPONENTS - 1
    needed = max(floor, spread_size(requested, expected_bytes, threads), -(-expected_bytes // room))
    if needed > MAX_PART_BYTES:
        raise ValueError(
            f"{expected_bytes} bytes in one object need parts of {needed} bytes to stay within "
            f"the {limit}-{what}; parts are at most {MAX_PART_BYTES} bytes"
        )
    return needed


@dataclass(frozen=True)
class Upload:
    """What a writer knows of the objects it is about to write, which DCP's ``create_stream(path,
    mode)`` has no room to say: the bytes a stream will carry (they size its parts and its budget
    of short parts; 0 when not known before writing, as for the pickled ``.metadata``), and the
    tensors pinned while it is written (a write of their memory returns without waiting for its
    upload)."""

    expected_bytes: int
    pins: PinnedTensors | None = None


# The file systems this process rebuilt from a recipe: DCP's checkpointer process receives the
# writer afresh with every save, and makes its storage client (token, connections) once.
_REBUILT: dict[Any, GcsFileSystem] = {}


def _rebuilt(recipe: Callable[[], GcsFileSystem]) -> GcsFileSystem:
    if recipe not in _REBUILT:
        _REBUILT[recipe] = recipe()
    return _REBUILT[recipe]


class GcsFileSystem(FileSystemBase):
    """DCP's file-system interface over one bucket. Paths are ``gs://bucket/name`` strings.

    Objects are written only inside :meth:`uploading`, which says what DCP's call cannot.
    """

    def __init__(
        self,
        *,
        client: storage.Client,
        threads: int,
        part_size_bytes: int,
        policy: RetryPolicy = DEFAULT_POLICY,
        checksums: bool = True,
        discard_seconds: float = DISCARD_SECONDS,
        upload_scheme: UploadScheme = UploadScheme.AUTO,
        recipe: Callable[[], GcsFileSystem] | None = None,
    ) -> None:
        require_positive(threads=threads, part_size_bytes=part_size_bytes)
        # How another process makes an equal file system: a storage client cannot be pickled,
        # and DCP's process checkpointer pickles the writer (and so this) for every save.
        self.recipe = recipe
        # Resolved once: every object of the run goes up the same way.
        self.upload_scheme = upload_scheme.resolve(os.environ.get(EMULATOR_ENV))
        self.client = client
        self.threads = threads
        self.part_size = part_size_bytes
        self.policy = policy
        self.checksums = checksums
        # How long an aborted upload may take to delete its parts.
        self.discard_seconds = discard_seconds
        self._upload: Upload | None = None
        # Counted across every load through this file system (one per rank with a session).
        self.read_paths = ReadPaths()
        self._buckets: dict[str, GcsObjects] = {}

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self.recipe is None:
            raise TypeError(
                "a GcsFileSystem made without a recipe cannot be sent to another process"
            )
        return (_rebuilt, (self.recipe,))

    def objects(self, bucket: str) -> GcsObjects:
        if bucket not in self._buckets:
            self._buckets[bucket] = GcsObjects(
                self.client, bucket, self.policy, checksums=self.checksums
            )
        return self._buckets[bucket]

    def locate(self, path: str | os.PathLike[str]) -> tuple[GcsObjects, str]:
        bucket, name = split_gs_url(os.fspath(path))
        if not name:
            raise ValueError(f"{path}: a gs:// path needs an object name after the bucket")
        return self.objects(bucket), name

    @contextmanager
    def uploading(self, upload: Upload) -> Iterator[None]:
        """Write objects as ``upload`` says until the block ends (DCP's writes inside it are
        synchronous: every stream is closed or aborted by then)."""
        if self._upload is not None:
            raise RuntimeError("GcsFileSystem.uploading: another save is writing through it")
        self._upload = upload
        try:
            yield
        finally:
            self._upload = None

    @contextmanager
    def create_stream(
        self, path: str | os.PathLike[str], mode: str
    ) -> Generator[io.IOBase, None, None]:
        objects, name = self.locate(path)
        if mode == "rb":
            yield io.BytesIO(objects.read_all(name))
        elif mode == "wb":
            upload = self._upload
            if upload is None:
                # A guess would size the parts for a small object and, nothing being pinned,
                # make every write of a tensor wait for its upload.
                raise RuntimeError(
                    f"GcsFileSystem.create_stream({os.fspath(path)!r}, 'wb') outside uploading():"
                    " the writer must say how many bytes the object will carry and what it pins"
                )
            scheme = self.upload_scheme
            part = part_size_for(self.part_size, upload.expected_bytes, self.threads, scheme)
            kind: type[PartedUploadStream] = (
                MultipartUploadStream if scheme is UploadScheme.MULTIPART else CompositeUploadStream
            )
            stream = kind(
                objects,
                name,
                threads=self.threads,
                part_size=part,
                keepalive=upload.pins.owner if upload.pins is not None else None,
                expected_bytes=upload.expected_bytes,
                discard_seconds=self.discard_seconds,
            )
            try:
                yield stream
            except BaseException as exc:
                stream.abort()
                if stream.error is not None and stream.error is not exc:
                    # torch.save turns a failed write into a vague "unexpected pos": surface
                    # the upload error, which names the object.
                    raise stream.error from exc
                raise
            stream.close()
        else:
            raise ValueError(f"unsupported mode {mode!r} for {path}")

    def concat_path(self, path: str | os.PathLike[str], suffix: str) -> str | os.PathLike[str]:
        return f"{os.fspath(path).rstrip('/')}/{suffix}"

    def init_path(self, path: str | os.PathLike[str]) -> str | os.PathLike[str]:
        if not is_gs_url(path):
            raise ValueError(f"checkpoint_id must be a gs://bucket/prefix URL, got {path!r}")
        return os.fspath(path).rstrip("/")

    def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
        objects, name = self.locate(path)
        new_objects, new_name = self.locate(new_path)
        if new_objects is not objects:
            raise ValueError(f"cannot rename across buckets: {path} -> {new_path}")
        objects.copy(name, new_name)
        objects.delete(name)

    def mkdir(self, path: str | os.PathLike[str]) -> None:
        """Object stores have no directories."""

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return is_gs_url(checkpoint_id)

    def exists(self, path: str | os.PathLike[str]) -> bool:
        objects, name = self.locate(path)
        return objects.exists(name)

    def rm_file(self, path: str | os.PathLike[str]) -> None:
        objects, name = self.locate(path)
        objects.delete(name)

    def ls(self, path: str | os.PathLike[str]) -> list[str]:
        bucket, prefix = split_gs_url(os.fspath(path))
        prefix = f"{prefix}/" if prefix else ""
        return [f"gs://{bucket}/{n}" for n in self.objects(bucket).list_names(prefix)]


class PinnedTensors:
    """The tensors a save has resolved so far, each held until the save's data is written.

    DCP hands ``torch.save`` each tensor, and ``torch.save`` passes the payload to the stream
    as a memoryview of the tensor's own storage. When such a view lies inside a tensor held
    here, the upload can keep a reference to that tensor and send the view after ``write``
    returns: no copy and no stall between tensors.
    """

    def __init__(self) -> None:
        self._spans: list[tuple[int, int, torch.Tensor]] = []

    def add(self, t: torch.Tensor) -> None:
        if t.device.type == "cpu":
            storage = t.untyped_storage()
            start = storage.data_ptr()
            self._spans.append((start, start + storage.nbytes(), t))

    def owner(self, view: memoryview) -> object | None:
        if not self._spans or view.nbytes == 0:
            return None
        with warnings.catch_warnings():
            # frombuffer warns about read-only buffers; it only reads the address here.
            warnings.simplefilter("ignore", UserWarning)
            start = torch.frombuffer(view, dtype=torch.uint8).data_ptr()
        end = start + view.nbytes
        for lo, hi, tensor in reversed(self._spans):
            if lo <= start and end <= hi:
                return tensor
        return None


class _PinningPlanner:
    """Delegates to DCP's planner and records each tensor it resolves for writing."""

    def __init__(self, planner: SavePlanner, pins: PinnedTensors) -> None:
        self._planner = planner
        self._pins = pins

    def resolve_data(self, write_item: WriteItem) -> torch.Tensor | io.BytesIO:
        data = self._planner.resolve_data(write_item)
        if isinstance(data, torch.Tensor):
            self._pins.add(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._planner, name)


class GcsOptions(TypedDict, total=False):
    """How a writer or reader reaches GCS: a ``filesystem`` to share (a rank's session's), or
    the settings to make one with (``client`` defaults to one pooled connection per thread)."""

    project: str | None
    threads: int
    part_size_bytes: int
    client: storage.Client | None
    retry_policy: RetryPolicy
    upload_scheme: UploadScheme
    filesystem: GcsFileSystem | None


class _OnGcs:
    """What the writer and the reader share: the file system they move bytes through, swapped
    into DCP's file-system base class, and ``gs://`` checkpoint ids."""

    gcs: GcsFileSystem

    def _use_gcs(self, checkpoint_id: str, options: GcsOptions) -> None:
        fs = options.get("filesystem")
        if fs is None:
            threads = options.get("threads", DEFAULT_THREADS)
            client = options.get("client")
            if client is None:
                # One pooled connection per worker, plus a few for metadata calls.
                client = make_client(options.get("project"), pool_size=threads + 4)
            fs = GcsFileSystem(
                client=client,
                threads=threads,
                part_size_bytes=options.get("part_size_bytes", DEFAULT_PART_SIZE),
                policy=options.get("retry_policy", DEFAULT_POLICY),
                upload_scheme=options.get("upload_scheme", UploadScheme.AUTO),
            )
        self.gcs = fs
        torch_seam.use_filesystem(self, fs, os.fspath(fs.init_path(checkpoint_id)))

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return is_gs_url(checkpoint_id)


class GcsStorageWriter(_OnGcs, FileSystemWriter):
    """Writes a DCP checkpoint under ``gs://bucket/prefix``, each rank's object in parallel parts.

    ``threads`` parts of at most ``part_size_bytes`` are in flight at once per rank.
    """

    def __init__(
        self,
        checkpoint_id: str,
        writer_options: Mapping[str, Any] | None = None,
        **options: Unpack[GcsOptions],
    ) -> None:
        # One DCP write thread, hence one object per rank; the parallelism is inside it.
        # sync_files is off: durability comes from the upload's completion, and DCP's
        # fallback for streams without fileno() would os.sync() the local disk.
        # writer_options: more of FileSystemWriter's (torch_seam.extension_options).
        super().__init__(
            checkpoint_id,
            single_file_per_rank=True,
            sync_files=False,
            thread_count=1,
            **dict(writer_options or {}),
        )
        self._use_gcs(checkpoint_id, options)

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        # torch.save adds under a KiB of zip framing per tensor.
        expected = sum(
            torch_seam.item_size(i) + 4096 if i.tensor_data is not None else 4096
            for i in plan.items
        )
        pins = PinnedTensors()
        with self.gcs.uploading(Upload(expected, pins)):
            return super().write_data(plan, cast(SavePlanner, _PinningPlanner(planner, pins)))

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        # The coordinator's .metadata: pickled as it is written, so its size is not known first.
        with self.gcs.uploading(Upload(expected_bytes=0)):
            super().finish(metadata, results)

    def storage_meta(self) -> StorageMeta | None:
        return StorageMeta(checkpoint_id=self.checkpoint_id, save_id=self.save_id)


class GcsStorageReader(_OnGcs, FileSystemReader):
    """Reads a DCP checkpoint from ``gs://bucket/prefix`` with parallel ranged reads."""

    def __init__(self, checkpoint_id: str, **options: Unpack[GcsOptions]) -> None:
        super().__init__(checkpoint_id)
        self._use_gcs(checkpoint_id, options)

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        objects, prefix = self.gcs.locate(self.path)
        storage_data = torch_seam.reader_storage_data(self)
        # Ranges sized from what this plan reads, so every thread has ranges to fetch.
        total = sum(storage_data[req.storage_index].length for req in plan.items)
        reader = ParallelReader(
            objects,
            lambda relative: f"{prefix}/{relative}",
            threads=self.gcs.threads,
            part_size=spread_size(self.gcs.part_size, total, self.gcs.threads),
            transforms=torch_seam.reader_transforms(self),
            paths=self.gcs.read_paths,
        )
        reader.read(plan.items, storage_data, planner)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut
