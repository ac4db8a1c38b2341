"""DCP's ``torch.save`` blobs as a load meets them: where a tensor's payload lies in its blob,
and where each blob of a coalesced read lands."""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import torch
from torch.distributed.checkpoint.planner import ReadItem

from ckptbench.workload.storage.torch_seam import StorageInfo, TensorRecord, parse_tensor_blob

# Enough for the zip records before a tensor's payload (the pickled layout among them), and
# for the records and central directory after it.
HEAD_BYTES = 16 * 1024
TAIL_BYTES = 16 * 1024


def tensor_memory(t: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor's memory (numpy is not required)."""
    if t.device.type != "cpu" or not t.is_contiguous():
        raise ValueError("tensor_memory needs a contiguous CPU tensor")
    nbytes = t.numel() * t.element_size()
    if nbytes == 0:
        return memoryview(bytearray())
    array = (ctypes.c_ubyte * nbytes).from_address(t.data_ptr())
    return memoryview(array).cast("B")


class BlobLayouts:
    """Where the payload lies in ``torch.save`` blobs, remembered across the blobs of a load.

    Parsing a blob's zip records and pickle costs about 0.2 ms of Python (holding the GIL): for a
    rank of 1,500 small tensors that is most of the load. Blobs of tensors of one shape and dtype
    are byte for byte the same up to the payload (zip local headers carry no sizes or crc32s, and
    the pickled layout comes first), and their length is the same. So a blob whose length and
    bytes before the payload match a blob already parsed has that blob's layout; anything else is
    parsed."""

    def __init__(self) -> None:
        self._known: dict[int, list[tuple[bytes, TensorRecord]]] = {}
        self._lock = threading.Lock()
        self.parsed = 0

    def predict(self, item: Item) -> tuple[bytes, TensorRecord] | None:
        """The layout an item's blob will have if it is like a blob already parsed: one of its
        length whose tensor fits the item's destination. Confirmed (or not) once read."""
        if item.target is None or item.info.transform_descriptors:
            return None
        for prefix, known in self._known.get(item.info.length, ()):
            if fits_directly(item, known):
                return prefix, known
        return None

    def parse(self, blob: memoryview) -> TensorRecord | None:
        n = blob.nbytes
        for prefix, known in self._known.get(n, ()):
            if blob[: len(prefix)] == prefix:
                return known
        record = parse_tensor_blob(blob[: min(n, HEAD_BYTES)], blob[max(0, n - TAIL_BYTES) :], n)
        with self._lock:
            self.parsed += 1
            if record is not None:
                layouts = self._known.setdefault(n, [])
                if len(layouts) < 16:  # a few shapes share a length; more is not worth a scan
                    layouts.append((bytes(blob[: record.data_offset]), record))
        return record


@dataclass
class Item:
    req: ReadItem
    info: StorageInfo
    target: torch.Tensor | None  # None for BYTE_IO


@dataclass
class Slot:
    """Where one item of a coalesced read lands: its whole blob in a buffer, or, when its
    layout is predicted, the bytes before and after the payload in scratch and the payload in
    the destination tensor."""

    item: Item
    blob: bytearray | None = None
    head: bytearray | None = None
    tail: bytearray | None = None
    prefix: bytes = b""

    @classmethod
    def of(cls, item: Item, known: tuple[bytes, TensorRecord] | None) -> Slot:
        if known is None:
            return cls(item, blob=bytearray(item.info.length))
        prefix, record = known
        after = item.info.length - record.data_offset - record.data_length
        return cls(item, head=bytearray(record.data_offset), tail=bytearray(after), prefix=prefix)

    def segments(self) -> list[memoryview]:
        if self.blob is not None:
            return [memoryview(self.blob)]
        assert self.head is not None and self.tail is not None and self.item.target is not None
        return [memoryview(self.head), tensor_memory(self.item.target), memoryview(self.tail)]

    def landed(self) -> bool:
        """The bytes read before the payload are the predicted layout's: the payload is where
        it belongs."""
        return self.head is not None and bytes(self.head) == self.prefix


def fits_directly(item: Item, record: TensorRecord) -> bool:
    target = item.target
    if target is None or not record.is_dense():
        return False
    return (
        target.device.type == "cpu"
        and target.is_contiguous()
        and target.dtype == record.dtype
        and tuple(target.shape) == record.size
        and all(o == 0 for o in item.req.storage_offsets)
        and tuple(item.req.lengths) == record.size
    )
