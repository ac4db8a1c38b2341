"""CRC32C as GCS computes it: of a buffer, in GCS's base64 form, and combined across pieces.

GCS reports every object's CRC32C (base64 of the big-endian value). Combining lets the crc of an
object be derived from the crcs of its consecutive pieces without reading it again: a composed
object's crc from its parts', a read's from the ranges that cover it. The combination is zlib's
``crc32_combine`` with the Castagnoli polynomial: appending ``n`` bytes multiplies the first crc by
x^(8n) in GF(2), done here with one precomputed 32x32 bit matrix per power of two.
"""

from __future__ import annotations

import base64
import ctypes
import glob
import os
import threading
from collections.abc import Callable, Iterable

import google_crc32c

_POLY = 0x82F63B78  # CRC32C (Castagnoli), reflected


class _PyBuffer(ctypes.Structure):
    # CPython's Py_buffer (stable since 3.3), filled by PyObject_GetBuffer.
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


# Buffers from this size up are checksummed with the GIL released (about 100 us of work and up);
# smaller ones holding it. Releasing it for a short call costs more than the call: on getting it
# back the thread queues behind whichever thread took it, up to the interpreter's switch interval
# (5 ms). A 1,500-tensor load (three crc calls per tensor, on 8 read threads) spent 1.9 s of
# thread time in crc calls, 0.18 s with this threshold; its wall time did not change measurably
# (bench/bench_crc_gil.py): the threads' waits overlapped the others' work.
RELEASE_GIL_MIN_BYTES = 2 << 20

_Extend = Callable[[int, int, int], int]


def _load_extend() -> tuple[_Extend, _Extend] | None:
    """google-crc32c's own C library, called directly: its Python binding accepts only
    ``bytes`` (a copy of every part), while this takes any buffer in place. The same function
    twice: loaded as a ``CDLL`` (the GIL released during the call, so transfer threads checksum
    large buffers in parallel) and as a ``PyDLL`` (the GIL held, for small buffers)."""
    folder = os.path.join(
        os.path.dirname(os.path.dirname(google_crc32c.__file__)), "google_crc32c.libs"
    )
    for path in sorted(glob.glob(os.path.join(folder, "libcrc32c*.so*"))):
        try:
            pair = (ctypes.CDLL(path).crc32c_extend, ctypes.PyDLL(path).crc32c_extend)
        except OSError:
            continue
        for extend in pair:
            extend.restype = ctypes.c_uint32
            extend.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
        return pair
    return None


_EXTENDS = _load_extend()
_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_PYBUF_SIMPLE = 0


def value(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """The crc of a contiguous buffer (continuing ``crc``), computed in place."""
    if _EXTENDS is None:  # pragma: no cover - a google-crc32c wheel without its library
        return int(google_crc32c.extend(crc, bytes(data)))
    view = _PyBuffer()
    if _get_buffer(data, ctypes.byref(view), _PYBUF_SIMPLE) != 0:  # pragma: no cover
        raise TypeError(f"not a contiguous buffer: {type(data).__name__}")
    try:
        releasing, holding = _EXTENDS
        extend = releasing if view.len >= RELEASE_GIL_MIN_BYTES else holding
        return int(extend(crc, view.buf, view.len))
    finally:
        _release_buffer(ctypes.byref(view))


def to_gcs(crc: int) -> str:
    """The form GCS uses in object metadata and in ``X-Goog-Hash``."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def from_gcs(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "big")


def _times(matrix: list[int], vector: int) -> int:
    out = 0
    i = 0
    while vector:
        if vector & 1:
            out ^= matrix[i]
        vector >>= 1
        i += 1
    return out


def _square(matrix: list[int]) -> list[int]:
    return [_times(matrix, matrix[n]) for n in range(32)]


def _shift_operators(count: int = 64) -> list[list[int]]:
    """``ops[k]`` appends 2**k zero bytes to a crc register."""
    one_bit = [_POLY] + [1 << n for n in range(31)]
    op = _square(_square(_square(one_bit)))  # 8 bits: one byte
    ops = [op]
    for _ in range(count - 1):
        op = _square(op)
        ops.append(op)
    return ops


_OPS = _shift_operators()


def combine(crc1: int, crc2: int, length2: int) -> int:
    """The crc of ``a + b`` from ``crc(a)``, ``crc(b)`` and ``len(b)``."""
    k = 0
    while length2:
        if length2 & 1:
            crc1 = _times(_OPS[k], crc1)
        length2 >>= 1
        k += 1
    return crc1 ^ crc2


def combine_all(pieces: Iterable[tuple[int, int]]) -> int:
    """The crc of consecutive pieces given as ``(crc, length)``, in order."""
    total = 0
    for crc, length in pieces:
        total = combine(total, crc, length)
    return total


class Coverage:
    """The crc32cs of the byte ranges read from objects, to check each object whose ranges
    cover it whole. Thread-safe: transfer threads record as they finish."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ranges: dict[str, list[tuple[int, int, int]]] = {}

    def add(self, name: str, offset: int, data: bytes | bytearray | memoryview) -> None:
        length = memoryview(data).nbytes
        if length:
            self.add_value(name, offset, length, value(data))

    def add_value(self, name: str, offset: int, length: int, c: int) -> None:
        """A range whose crc32c the caller computed (over bytes that lay in several places)."""
        if length == 0:
            return
        with self._lock:
            self._ranges.setdefault(name, []).append((offset, length, c))

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._ranges)

    def combined(self, name: str, size: int) -> int | None:
        """The crc of the object's bytes as read, or None when the ranges read do not cover
        ``[0, size)`` exactly once (overlapping reads are deduplicated when identical)."""
        with self._lock:
            ranges = sorted(set(self._ranges.get(name, [])))
        pos = 0
        pieces = []
        for offset, length, c in ranges:
            if offset != pos:
                return None
            pieces.append((c, length))
            pos += length
        if pos != size:
            return None
        return combine_all(pieces)
