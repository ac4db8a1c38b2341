"""The dataset's bytes: made from the seed, each sample carrying its index and checksum, and
checked on the way to the accelerator (docs/data-loading.md#the-dataset).

A raw or npz sample is a 16-byte header (magic, index, and a crc32c of the magic, the index and
the payload), then random bytes from PCG64 seeded by (seed, index); a parquet row holds its index,
the crc32c of its text and the text (lowercase letters from the same generator). So any sample
can be checked alone, a byte flipped anywhere fails its checksum, and a sample served in another's
place fails its index.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import google_crc32c
import numpy as np

from ckptbench.workload.contract.data.choices import DataFormat
from ckptbench.workload.contract.data.layout import HEADER_BYTES, MAGIC, Dataset

_HEADER = struct.Struct("<4sQI")


class SampleError(ValueError):
    """A sample that is not what the dataset holds; the message names it."""


def _rng(seed: int, index: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([seed, index]))


def payload(seed: int, index: int, nbytes: int) -> bytes:
    return _rng(seed, index).bytes(nbytes)


def text(seed: int, index: int, nbytes: int) -> bytes:
    """A parquet row's text: ``nbytes`` lowercase letters."""
    return (_rng(seed, index).integers(0, 26, nbytes, dtype=np.uint8) + ord("a")).tobytes()


_CHECKED = 12  # the header's bytes its checksum covers: the magic and the index


def checksum(raw: bytes | np.ndarray[Any, np.dtype[np.uint8]]) -> int:
    """What a raw or npz sample's header carries: the crc32c of all its bytes but the checksum."""
    return int(google_crc32c.extend(google_crc32c.value(raw[:_CHECKED]), raw[HEADER_BYTES:]))


def sample(seed: int, index: int, nbytes: int) -> bytes:
    """Raw and npz sample ``index``: its header, then its payload."""
    head = _HEADER.pack(MAGIC, index, 0)
    raw = head + payload(seed, index, nbytes - HEADER_BYTES)
    return _HEADER.pack(MAGIC, index, checksum(raw)) + raw[HEADER_BYTES:]


def encode_file(ds: Dataset, file_index: int) -> bytes:
    """File ``file_index`` of the dataset, as stored."""
    first = file_index * ds.samples_per_file
    indices = range(first, first + ds.samples_per_file)
    if ds.format is DataFormat.RAW:
        return b"".join(sample(ds.seed, i, ds.sample_bytes) for i in indices)
    if ds.format is DataFormat.NPZ:
        rows = np.frombuffer(
            b"".join(sample(ds.seed, i, ds.sample_bytes) for i in indices), dtype=np.uint8
        ).reshape(ds.samples_per_file, ds.sample_bytes)
        out = io.BytesIO()
        np.savez(out, x=rows)
        return out.getvalue()
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [text(ds.seed, i, ds.sample_bytes) for i in indices]
    table = pa.table(
        {
            "id": pa.array(list(indices), pa.int64()),
            "crc32c": pa.array([google_crc32c.value(t) for t in texts], pa.int64()),
            "text": pa.array([t.decode("ascii") for t in texts], pa.string()),
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


@dataclass(frozen=True)
class Sample:
    """One sample as the loader hands it on: its index, its bytes, and the checksum it carries."""

    index: int
    data: bytes  # raw and npz: header and payload; parquet: the row's text
    crc32c: int


def decode_file(fmt: DataFormat, data: bytes, sample_bytes: int) -> Iterator[Sample]:
    """The samples of one stored file, in order."""
    if fmt is DataFormat.RAW:
        if len(data) % sample_bytes:
            raise SampleError(
                f"a raw file of {len(data)} bytes is not a whole number of {sample_bytes}-byte "
                "samples"
            )
        for start in range(0, len(data), sample_bytes):
            yield split(data[start : start + sample_bytes])
    elif fmt is DataFormat.NPZ:
        with np.load(io.BytesIO(data)) as npz:
            rows = npz["x"]
        for row in rows:
            yield split(row.tobytes())
    else:
        import pyarrow.parquet as pq

        table = pq.read_table(io.BytesIO(data))
        for index, crc, row in zip(
            table.column("id").to_pylist(),
            table.column("crc32c").to_pylist(),
            table.column("text").to_pylist(),
            strict=True,
        ):
            yield Sample(int(index), row.encode("ascii"), int(crc))


def split(raw: bytes) -> Sample:
    """A raw or npz sample's index and checksum, read from its header."""
    if len(raw) < HEADER_BYTES:
        raise SampleError(f"a sample of {len(raw)} bytes is shorter than its header")
    magic, index, crc = _HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise SampleError(f"a sample without ckptbench's header (starts {raw[:4]!r})")
    return Sample(index, raw, crc)


def verify(s: Sample, fmt: DataFormat, expected_bytes: int, expected: range | None) -> None:
    """Raise :class:`SampleError`, naming the sample, unless its bytes are what it carries."""
    if len(s.data) != expected_bytes:
        raise SampleError(f"sample {s.index}: {len(s.data)} bytes, expected {expected_bytes}")
    if expected is not None and s.index not in expected:
        raise SampleError(f"sample {s.index} served where samples {expected} were asked for")
    found = google_crc32c.value(s.data) if fmt is DataFormat.PARQUET else checksum(s.data)
    if found != s.crc32c:
        raise SampleError(f"sample {s.index}: its bytes do not match its crc32c (corrupted)")
