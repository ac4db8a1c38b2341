"""``bench/bench_data.py`` in a tiny mode (one round, 16 files, one rank): every section it promises
is printed with numbers, its ratios and fractions are computed from the figures it prints beside
them, and every reader's reads under the model went through the model. No timing targets."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
NUM = r"(\d+(?:\.\d+)?)"
SPREAD = rf"{NUM} \[{NUM}-{NUM}\]"
READER_LINE = re.compile(
    rf"^(\w+)\s+{SPREAD} samples/s  {SPREAD} MiB/s  x one stream {NUM}"
    rf"(?:  requests through the model (\d+))?$"
)
ROUND_LINE = re.compile(rf"^  round 1 (bare|model)\s+(\w+)\s*: +{NUM} samples/s +{NUM} MiB/s$")
READERS = {"gcs": ("dataflux", "gcs", "gcsfs"), "s3": ("s3", "s3fs")}
RATIOS = {"gcs": (("dataflux", "gcs"), ("dataflux", "gcsfs")), "s3": (("s3", "s3fs"),)}


def _module() -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # the bench scripts import each other by file name
    spec = importlib.util.spec_from_file_location("bench_data", BENCH / "bench_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_data"] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def printed() -> str:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_data.py"), "--rounds", "1", "--files", "16",
         "--ranks", "1", "--stream-objects", "4"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _section(printed: str, server: str, regime: str) -> list[str]:
    """The lines of the summary ``== <server> <regime>: ...`` up to the next blank line."""
    lines = printed.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(f"== {server} {regime}: ")]
    assert len(starts) == 1, f"section {server} {regime} printed {len(starts)} times:\n{printed}"
    out = []
    for line in lines[starts[0] :]:
        if not line.strip():
            break
        out.append(line)
    return out


def _readers(section: list[str]) -> dict[str, tuple[float, ...]]:
    found = {}
    for line in section:
        m = READER_LINE.match(line)
        if m:
            found[m.group(1)] = tuple(float(g) if g else -1.0 for g in m.groups()[1:])
    return found


@pytest.mark.slow
@pytest.mark.timeout(1000)
@pytest.mark.parametrize("server", ["gcs", "s3"])
@pytest.mark.parametrize("regime", ["bare", "model"])
def test_every_section_prints_each_reader_its_one_stream_and_its_ratios(
    printed: str, server: str, regime: str
) -> None:
    section = _section(printed, server, regime)
    assert ("UNDER THE MODEL" in section[0]) == (regime == "model"), section[0]
    assert ("BARE" in section[0]) == (regime == "bare"), section[0]
    readers = _readers(section)
    assert tuple(readers) == READERS[server], section
    [stream_line] = [line for line in section if line.startswith("one stream (")]
    m = re.search(rf"sequential GETs\): {SPREAD} MiB/s$", stream_line)
    assert m, stream_line
    stream = float(m.group(1))
    assert stream > 0
    rounds = {
        (r[1], r[2]): (float(r[3]), float(r[4]))
        for r in (ROUND_LINE.match(line) for line in printed.splitlines())
        if r and r[1] == regime
    }
    for reader, (sps, _, _, mib, _, _, of_stream, requests) in readers.items():
        assert sps > 0 and mib > 0, (reader, section)
        # One round: the median is that round's figure, as printed when it was measured.
        assert (sps, mib) == rounds[(regime, reader)], (reader, rounds)
        assert of_stream == pytest.approx(mib / stream, abs=0.011 + 0.01 * mib / stream)
        # Under the model every reader's requests went through it (one or more a file, but
        # dataflux's few composes and downloads a batch); bare, none are counted.
        least = 1 if reader == "dataflux" else 16
        assert (requests >= least) if regime == "model" else (requests == -1), (reader, requests)
    for top, bottom in RATIOS[server]:
        [line] = [x for x in section if x.startswith(f"ratio {top}/{bottom} {regime}: ")]
        m = re.search(rf": {SPREAD}x  \((.+)\)$", line)
        assert m, line
        expected = readers[top][0] / readers[bottom][0]
        assert float(m.group(1)) == pytest.approx(expected, rel=0.02, abs=0.01), line
        if (top, bottom) == ("dataflux", "gcs"):
            assert "1,299 s direct / 515 s DataFlux = 2.52x" in m.group(4)
            assert "2-3x" in m.group(4)


@pytest.mark.slow
@pytest.mark.timeout(1000)
def test_each_server_says_its_dataset_was_made_once_and_reused(printed: str) -> None:
    heads = [line for line in printed.splitlines() if line.startswith("#### ")]
    assert len(heads) == 2, heads
    for head in heads:
        assert "dataset raw-16x1x102400-seed0 made in" in head and "then reused" in head, head


def test_rounds_alternate_the_readers_order() -> None:
    bench = _module()
    assert bench.interleaved(("a", "b", "c"), 0) == ["a", "b", "c"]
    assert bench.interleaved(("a", "b", "c"), 1) == ["c", "b", "a"]
    assert bench.interleaved(("a", "b"), 2) == ["a", "b"]


def test_ratios_pair_the_runs_of_one_round_and_spread_gives_median_min_max() -> None:
    bench = _module()
    assert bench.per_round_ratios([4.0, 9.0], [2.0, 3.0]) == [2.0, 3.0]
    with pytest.raises(ValueError):
        bench.per_round_ratios([1.0], [1.0, 2.0])
    assert bench.spread([3.0, 1.0, 2.0]) == "2.0 [1.0-3.0]"
    assert bench.spread([2.0 * 2**20], 2**20, ".2f") == "2.00 [2.00-2.00]"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--servers", "azure"], "--servers: azure"),
        (["--files", "0"], "--files: must be at least 1"),
        (["--rate", "0"], "--rate must be positive"),
    ],
)
def test_bad_options_are_refused_by_name_before_any_server_starts(
    args: list[str], said: str
) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_data.py"), *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert said in proc.stderr
    assert "bench_data:" not in proc.stdout
