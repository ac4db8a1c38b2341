"""crc32c as GCS computes it: in place on any buffer, combined across pieces, and the coverage of
an object by the ranges a load read."""

from __future__ import annotations

import ctypes
import itertools
import os

import google_crc32c
import pytest

from ckptbench.workload.storage.gcs import crc

BIG = crc.RELEASE_GIL_MIN_BYTES


@pytest.mark.parametrize("size", [0, 1, 300, BIG - 1, BIG, BIG + 12345])
def test_value_is_google_crc32c_on_either_side_of_the_gil_threshold(size: int) -> None:
    data = os.urandom(size)
    expected = int(google_crc32c.value(data))
    assert crc.value(data) == expected
    assert crc.value(memoryview(bytearray(data))) == expected  # any buffer, in place
    half = size // 2
    assert crc.value(data[half:], crc.value(data[:half])) == expected  # continued


def test_both_c_entry_points_agree() -> None:
    # The GIL-releasing and the GIL-holding loads of the one C function.
    assert crc._EXTENDS is not None
    releasing, holding = crc._EXTENDS
    data = bytearray(os.urandom(4096))
    view = crc._PyBuffer()
    assert crc._get_buffer(data, ctypes.byref(view), 0) == 0
    try:
        assert releasing(7, view.buf, view.len) == holding(7, view.buf, view.len)
        assert holding(0, view.buf, view.len) == int(google_crc32c.value(bytes(data)))
    finally:
        crc._release_buffer(ctypes.byref(view))


def test_gcs_form_round_trips() -> None:
    assert crc.to_gcs(0) == "AAAAAA=="
    assert crc.from_gcs(crc.to_gcs(0xDEADBEEF)) == 0xDEADBEEF


@pytest.mark.parametrize("cuts", [[0], [1], [5, 1000], [1, 2, 3, 70_000]])
def test_combined_pieces_are_the_whole(cuts: list[int]) -> None:
    data = os.urandom(100_000)
    bounds = [0, *cuts, len(data)]
    pieces = [(crc.value(data[a:b]), b - a) for a, b in itertools.pairwise(bounds)]
    assert crc.combine_all(pieces) == crc.value(data)


def test_coverage_checks_only_ranges_that_cover_the_object_exactly_once() -> None:
    data = os.urandom(10_000)
    cover = crc.Coverage()
    cover.add("o", 4000, data[4000:])
    assert cover.combined("o", len(data)) is None  # a gap at the start
    cover.add("o", 0, data[:4000])
    cover.add("o", 0, data[:4000])  # the same range twice: counted once
    assert cover.combined("o", len(data)) == crc.value(data)
    assert cover.combined("o", len(data) + 1) is None  # short of the object's end
    cover.add("o", 2000, data[2000:6000])  # an overlap that is not identical
    assert cover.combined("o", len(data)) is None
    assert cover.names() == ["o"]


def test_coverage_refuses_ranges_that_overlap_yet_add_up_to_the_object() -> None:
    data = os.urandom(10_000)
    cover = crc.Coverage()
    cover.add("o", 0, data[:5000])
    cover.add("o", 4000, data[4000:9000])
    cover.add_value("o", 9000, 1000, crc.value(data[9000:]))
    assert cover.combined("o", 11_000) is None
    cover = crc.Coverage()
    cover.add("o", 0, data[:6000])
    cover.add("o", 5000, data[5000:9000])  # 6000 + 4000 bytes: the object's size, overlapping
    assert cover.combined("o", len(data)) is None
