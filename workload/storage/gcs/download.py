"""Parallel ranged reads of DCP data objects, straight into the destination tensors.

DCP's file layout stores each tensor as a ``torch.save`` blob (an uncompressed zip) at
(offset, length) inside the rank's object. DCP's own reader ``torch.load``s each blob into a
fresh tensor and copies it into the destination: a second copy of every tensor. Here a large
tensor's blob header is read first (a few hundred bytes: zip local headers and the pickled
tensor layout), and when the stored tensor is plainly the destination's shape, dtype and a
contiguous storage, its payload is fetched in ``part_size`` ranges by parallel workers directly
into the destination's memory. Anything else (small tensors, transforms, views, other dtypes)
takes DCP's generic path, with small neighbouring items coalesced into one ranged read.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, as_completed, wait
from dataclasses import dataclass, field, fields
from typing import IO, Any, cast

import torch
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlanner, ReadItem

from ckptbench.workload.storage.gcs import crc
from ckptbench.workload.storage.gcs.blobs import (
    HEAD_BYTES,
    TAIL_BYTES,
    BlobLayouts,
    Item,
    Slot,
    fits_directly,
    tensor_memory,
)
from ckptbench.workload.storage.gcs.objects import GcsObjects
from ckptbench.workload.storage.retry import IntegrityError
from ckptbench.workload.storage.torch_seam import (
    StorageInfo,
    StorageReaderTransforms,
    TensorRecord,
    narrow_tensor_by_index,
    parse_tensor_blob,
)

# Tensors at least this large are read straight into their destination after a look at the
# blob's ends (two small requests); smaller ones are coalesced with their neighbours.
DIRECT_MIN_BYTES = 1 << 20


@dataclass
class ReadPaths:
    """How many items took each path: ``direct`` (ranged reads straight into the tensor),
    ``scattered`` (payload read straight into the tensor within a coalesced read), ``copied``
    (payload copied from a coalesced read, no ``torch.load``), ``generic``
    (``torch.load`` then a copy: DCP's own way) and ``bytes`` (non-tensor items)."""

    direct: int = 0
    scattered: int = 0
    copied: int = 0
    generic: int = 0
    bytes: int = 0
    checked: int = 0
    unchecked: int = 0
    mismatched: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, path: str) -> None:
        with self._lock:
            setattr(self, path, getattr(self, path) + 1)

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "_lock"}


class ParallelReader:
    """Executes one rank's load plan with ``threads`` workers."""

    def __init__(
        self,
        objects: GcsObjects,
        object_name: Callable[[str], str],
        *,
        threads: int,
        part_size: int,
        transforms: StorageReaderTransforms,
        paths: ReadPaths | None = None,
    ) -> None:
        self._objects = objects
        self._object_name = object_name
        self._threads = threads
        self._part_size = part_size
        self._transforms = transforms
        self.paths = paths if paths is not None else ReadPaths()
        self._coverage = crc.Coverage() if objects.checksums else None
        self._layouts = BlobLayouts()

    def read(
        self,
        reqs: Sequence[ReadItem],
        storage_data: dict[Any, StorageInfo],
        planner: LoadPlanner,
    ) -> None:
        items: list[Item] = []
        for req in reqs:
            info = storage_data[req.storage_index]
            target = (
                planner.resolve_tensor(req).detach() if req.type != LoadItemType.BYTE_IO else None
            )
            items.append(Item(req, info, target))

        direct = [
            i
            for i in items
            if i.target is not None
            and not i.info.transform_descriptors
            and i.info.length >= min(self._part_size, DIRECT_MIN_BYTES)
        ]
        direct_ids = {id(i) for i in direct}
        small = [i for i in items if id(i) not in direct_ids]

        loaded_bytes: list[tuple[ReadItem, bytes]] = []
        with ThreadPoolExecutor(self._threads, thread_name_prefix="gcs-read") as pool:
            futures: list[Future[Any]] = []
            try:
                self._learn_layouts(pool, small)
                for group in self._coalesce(small):
                    futures.append(pool.submit(self._read_group, group))
                heads = {pool.submit(self._read_ends, i): i for i in direct}
                futures.extend(heads)
                for fut in as_completed(heads):
                    item = heads[fut]
                    head, tail = fut.result()
                    record = parse_tensor_blob(head, tail, item.info.length)
                    if record is not None and fits_directly(item, record):
                        self.paths.count("direct")
                        self._record_ends(item, record, head, tail)
                        futures.extend(self._submit_direct(pool, item, record))
                    else:
                        futures.append(pool.submit(self._read_group, [item]))
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                for fut in done:
                    fut.result()
                for fut in futures:
                    result = fut.result()
                    if isinstance(result, list):
                        loaded_bytes.extend(result)
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
        self._check_coverage()

        # The planner is not documented as thread-safe: talk to it from this thread only.
        for req, data in loaded_bytes:
            planner.load_bytes(req, io.BytesIO(data))
        for item in items:
            if item.target is not None:
                planner.commit_tensor(item.req, item.target)

    def _learn_layouts(self, pool: ThreadPoolExecutor, small: list[Item]) -> None:
        """Parse one blob of each length that several small tensors share and no blob parsed
        so far explains, so that the coalesced reads can put those tensors' payloads straight
        into their memory: one small extra read per such length, not a copy of every byte."""
        by_length: dict[int, list[Item]] = {}
        for item in small:
            if item.target is not None and not item.info.transform_descriptors:
                by_length.setdefault(item.info.length, []).append(item)
        # Copying less than this costs less than the extra request that learning would.
        unknown = {
            n: items[0]
            for n, items in by_length.items()
            if len(items) > 1
            and n * len(items) >= DIRECT_MIN_BYTES
            and self._layouts.predict(items[0]) is None
        }
        if not unknown:
            return

        def learn(item: Item) -> None:
            name = self._object_name(item.info.relative_path)
            self._layouts.parse(memoryview(self._objects.read_range(name, item.info.offset,
                                                                    item.info.length)))  # fmt: skip

        for fut in [pool.submit(learn, item) for item in unknown.values()]:
            fut.result()

    def _check_coverage(self) -> None:
        """Every object this load read whole is checked against its stored crc32c: a byte
        damaged at rest or in flight fails the load, naming the object."""
        if self._coverage is None:
            return
        for relative in self._coverage.names():
            name = self._object_name(relative)
            size, stored = self._objects.stat(name)
            got = self._coverage.combined(relative, size)
            if got is not None and got != stored:
                self.paths.count("mismatched")
                raise IntegrityError(
                    f"{self._objects.url(name)}: crc32c of the {size} bytes read "
                    f"({crc.to_gcs(got)}) differs from the object's ({crc.to_gcs(stored)}): "
                    "the object is corrupted"
                )
            self.paths.count("checked" if got is not None else "unchecked")

    def _record(self, relative: str, offset: int, data: bytes | bytearray | memoryview) -> None:
        if self._coverage is not None:
            self._coverage.add(relative, offset, data)

    def _coalesce(self, items: list[Item]) -> list[list[Item]]:
        """Group items of one object that lie back to back into reads of about equal size, as
        few as reads of at most ``part_size`` allow (a group may pass it by one small item):
        17 reads where 16 would do would leave all threads but one idle for the last."""
        by_object: dict[str, list[Item]] = {}
        for item in items:
            by_object.setdefault(item.info.relative_path, []).append(item)
        groups: list[list[Item]] = []
        for members in by_object.values():
            members.sort(key=lambda i: i.info.offset)
            total = sum(i.info.length for i in members)
            target = -(-total // -(-total // self._part_size)) if total else 1
            current: list[Item] = []
            for item in members:
                if current:
                    last = current[-1].info
                    if item.info.offset != last.offset + last.length:
                        groups.append(current)
                        current = []
                current.append(item)
                if item.info.offset + item.info.length - current[0].info.offset >= target:
                    groups.append(current)
                    current = []
            if current:
                groups.append(current)
        return groups

    def _read_group(self, group: list[Item]) -> list[tuple[ReadItem, bytes]]:
        """One ranged read for items lying back to back. A plain tensor whose blob layout is
        known from a blob of the same length takes its payload straight into its memory (the
        zip records around it go to scratch); anything else is read into a buffer."""
        relative = group[0].info.relative_path
        start = group[0].info.offset
        slots = [Slot.of(item, self._layouts.predict(item)) for item in group]
        segments = [view for slot in slots for view in slot.segments()]
        self._objects.read_range_scattered(self._object_name(relative), start, segments)
        if self._coverage is not None:
            c = 0
            for view in segments:
                c = crc.value(view, c)
            self._coverage.add_value(relative, start, sum(v.nbytes for v in segments), c)
        out: list[tuple[ReadItem, bytes]] = []
        for slot in slots:
            if slot.blob is not None:
                out.extend(self._process_blob(slot.item, memoryview(slot.blob)))
            elif slot.landed():
                self.paths.count("scattered")
            else:
                # Not the layout its length suggested: read it again, the buffered way.
                item = slot.item
                name = self._object_name(item.info.relative_path)
                blob = self._objects.read_range(name, item.info.offset, item.info.length)
                out.extend(self._process_blob(item, memoryview(blob)))
        return out

    def _process_blob(self, item: Item, blob: memoryview) -> list[tuple[ReadItem, bytes]]:
        """One item from its whole blob in memory: a copy of the payload, DCP's generic load,
        or the bytes of a non-tensor item for the planner."""
        if self._copy_payload(item, blob):
            self.paths.count("copied")
            return []
        raw = cast(IO[bytes], io.BytesIO(blob))
        stream = self._transforms.transform_load_stream(
            item.req, item.info.transform_descriptors or (), raw
        )
        if item.target is None:
            self.paths.count("bytes")
            return [(item.req, stream.read())]
        seekable = stream if stream.seekable() else io.BytesIO(stream.read())
        try:
            loaded = torch.load(seekable, map_location="cpu", weights_only=True)
        except Exception as exc:
            # torch's own message would advise weights_only=False, which is never the cure
            # for a damaged object and would run its pickle: name the object instead.
            raise IntegrityError(
                f"{self._objects.url(self._object_name(item.info.relative_path))}: the "
                f"blob of {item.req.storage_index.fqn} at offset {item.info.offset} "
                f"({item.info.length} bytes) is not a readable tensor "
                f"({type(exc).__name__}): the object is corrupted"
            ) from None
        if not isinstance(loaded, torch.Tensor):
            raise TypeError(
                f"{self._objects.url(self._object_name(item.info.relative_path))} at "
                f"offset {item.info.offset}: expected a tensor, found {type(loaded).__name__}"
            )
        loaded = narrow_tensor_by_index(loaded, item.req.storage_offsets, item.req.lengths)
        if item.target.size() != loaded.size():
            raise ValueError(
                f"{item.req.storage_index}: stored size {tuple(loaded.size())} does not "
                f"match the destination's {tuple(item.target.size())}"
            )
        item.target.copy_(loaded)
        self.paths.count("generic")
        return []

    def _copy_payload(self, item: Item, blob: memoryview) -> bool:
        """Copy a plain tensor's payload from its fetched blob into the destination, skipping
        torch.load's intermediate tensor. False when the generic path is needed."""
        if item.target is None or item.info.transform_descriptors:
            return False
        record = self._layouts.parse(blob)
        if record is None or not fits_directly(item, record):
            return False
        dest = tensor_memory(item.target)
        dest[:] = blob[record.data_offset : record.data_offset + record.data_length]
        return True

    def _read_ends(self, item: Item) -> tuple[bytearray, bytearray]:
        name = self._object_name(item.info.relative_path)
        off, length = item.info.offset, item.info.length
        head = self._objects.read_range(name, off, min(HEAD_BYTES, length))
        tail_len = min(TAIL_BYTES, length)
        tail = self._objects.read_range(name, off + length - tail_len, tail_len)
        return head, tail

    def _record_ends(
        self, item: Item, record: TensorRecord, head: bytearray, tail: bytearray
    ) -> None:
        """The blob's bytes before and after the payload, from its fetched ends."""
        off, length = item.info.offset, item.info.length
        after = length - record.data_offset - record.data_length
        if record.data_offset <= len(head) and 0 <= after <= len(tail):
            self._record(item.info.relative_path, off, memoryview(head)[: record.data_offset])
            if after:
                self._record(
                    item.info.relative_path, off + length - after, memoryview(tail)[-after:]
                )

    def _read_into(self, relative: str, name: str, start: int, dest: memoryview) -> None:
        self._objects.read_range_into(name, start, dest)
        self._record(relative, start, dest)

    def _submit_direct(
        self, pool: ThreadPoolExecutor, item: Item, record: TensorRecord
    ) -> list[Future[None]]:
        assert item.target is not None
        dest = tensor_memory(item.target)
        name = self._object_name(item.info.relative_path)
        base = item.info.offset + record.data_offset
        step = self._part_size
        return [
            pool.submit(
                self._read_into,
                item.info.relative_path,
                name,
                base + lo,
                dest[lo : min(lo + step, dest.nbytes)],
            )
            for lo in range(0, dest.nbytes, step)
        ]
