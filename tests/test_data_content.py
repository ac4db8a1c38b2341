"""The dataset's bytes: every format round-trips, and every way a sample can be wrong is caught by
name (a flipped byte anywhere, a sample served in another's place, a wrong length)."""

from __future__ import annotations

import pytest

from ckptbench.workload.contract.data.choices import DataFormat
from ckptbench.workload.contract.data.layout import HEADER_BYTES, Dataset, Manifest
from ckptbench.workload.rank.data import content
from ckptbench.workload.rank.data.content import SampleError


def _ds(fmt: DataFormat, spf: int = 4, size: int = 300, seed: int = 7) -> Dataset:
    return Dataset("/data", fmt, files=3, samples_per_file=spf, sample_bytes=size, seed=seed)


@pytest.mark.parametrize("fmt", list(DataFormat))
def test_each_format_holds_each_files_samples_in_order_and_they_verify(fmt: DataFormat) -> None:
    ds = _ds(fmt)
    samples = list(content.decode_file(fmt, content.encode_file(ds, 1), ds.sample_bytes))
    assert [s.index for s in samples] == [4, 5, 6, 7]
    for s in samples:
        content.verify(s, fmt, ds.sample_bytes, range(4, 8))


@pytest.mark.parametrize("fmt", list(DataFormat))
def test_the_same_seed_makes_the_same_bytes_and_another_seed_others(fmt: DataFormat) -> None:
    a, b = content.encode_file(_ds(fmt), 2), content.encode_file(_ds(fmt), 2)
    assert a == b
    assert content.encode_file(_ds(fmt, seed=8), 2) != a


def test_a_raw_file_is_exactly_its_samples_back_to_back() -> None:
    ds = _ds(DataFormat.RAW)
    assert len(content.encode_file(ds, 0)) == ds.samples_per_file * ds.sample_bytes


@pytest.mark.parametrize("offset", [0, 5, 12, HEADER_BYTES, 150, 299])
def test_a_byte_flipped_anywhere_in_a_sample_fails_it_by_name(offset: int) -> None:
    raw = bytearray(content.sample(3, 42, 300))
    raw[offset] ^= 0x01
    with pytest.raises(SampleError, match="sample"):
        content.verify(content.split(bytes(raw)), DataFormat.RAW, 300, None)


def test_a_flipped_letter_of_a_parquet_row_fails_its_checksum() -> None:
    ds = _ds(DataFormat.PARQUET)
    (first, *_) = content.decode_file(ds.format, content.encode_file(ds, 0), ds.sample_bytes)
    text = bytearray(first.data)
    text[100] = ord("a") if text[100] != ord("a") else ord("b")
    bad = content.Sample(first.index, bytes(text), first.crc32c)
    with pytest.raises(SampleError, match=r"sample 0: .*crc32c"):
        content.verify(bad, ds.format, ds.sample_bytes, None)


def test_a_sample_served_in_anothers_place_fails_on_its_index() -> None:
    s = content.split(content.sample(0, 9, 300))
    with pytest.raises(SampleError, match="sample 9 served where"):
        content.verify(s, DataFormat.RAW, 300, range(0, 4))


def test_a_short_sample_fails_on_its_length() -> None:
    s = content.split(content.sample(0, 1, 300)[:200])
    with pytest.raises(SampleError, match="200 bytes, expected 300"):
        content.verify(s, DataFormat.RAW, 300, None)


def test_bytes_without_the_header_are_not_a_sample() -> None:
    with pytest.raises(SampleError, match="header"):
        content.split(b"x" * 64)


def test_file_names_sort_by_index_and_give_it_back() -> None:
    ds = _ds(DataFormat.NPZ)
    names = [ds.file_name(i) for i in (0, 9, 10, 123456789)]
    assert names == sorted(names)
    assert [ds.file_index(ds.file_path(i)) for i in (0, 9, 10, 123456789)] == [0, 9, 10, 123456789]


def test_a_dataset_is_named_for_what_makes_its_bytes() -> None:
    a, b = _ds(DataFormat.RAW), _ds(DataFormat.RAW, seed=8)
    assert a.name != b.name and a.name != _ds(DataFormat.NPZ).name
    assert a.path == f"/data/datasets/{a.name}"


def test_a_manifest_matches_only_its_own_dataset() -> None:
    ds = _ds(DataFormat.RAW)
    m = Manifest(format=ds.format, files=3, samples_per_file=4, sample_bytes=300, seed=7,
                 stored_bytes=3600, prepare_seconds=0.1)  # fmt: skip
    assert m.matches(ds)
    assert not m.matches(_ds(DataFormat.RAW, seed=8))
    assert not m.matches(_ds(DataFormat.RAW, size=301))
    assert not m.model_copy(update={"version": 2}).matches(ds)
