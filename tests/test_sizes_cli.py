"""``ckptbench sizes``: printed figures, errors naming the option, and the docs table in sync."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptbench import cli
from ckptbench.workload.local import sizes_cli

ROOT = Path(__file__).resolve().parent.parent


def test_sizes_prints_per_rank_total_counts_metadata_and_memory(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["sizes", "--model", "llama3-70b", "--world-size", "64"]) == 0
    out = capsys.readouterr().out
    assert "70,553,706,496" in out
    # 12 B/param + one 4-byte step per parameter tensor, in GiB.
    assert f"{(12 * 70_553_706_496 + 4 * 723) / 1024**3:.2f} GiB" in out
    assert "12.32 GiB largest (rank 0)" in out
    assert "2892 (2169 sharded, 723 replicated)" in out
    # 4 tensors and 12 pickled scalars per parameter tensor, torchtitan's 4 shared small items
    # and the rank's own dataloader state.
    assert f"{4 * 723 + 12 * 723 + 4 + 1:,} planned" in out
    assert f"{12 * 723 + 4:,} on every rank (written once) + 1 of its own" in out
    assert ".metadata" in out and "memory per rank" in out


def test_sizes_json_for_several_world_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--model", "llama3-8b", "--dtype", "mlperf", "--world-size", "8,64", "--json"]
    assert sizes_cli.main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["world_size"] for r in rows] == [8, 64]
    assert rows[0]["total_bytes"] == 14 * 8_030_261_248
    assert rows[1]["largest_rank_bytes"] < rows[0]["largest_rank_bytes"]
    gib = 1024**3
    assert rows[0]["memory_peak_bytes_estimate"] > rows[0]["largest_rank_bytes"] + gib // 4


def test_sizes_rejects_a_bad_override_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert sizes_cli.main(["--model", "llama3-8b", "--layers", "0"]) == 2
    assert "--layers: must be at least 1" in capsys.readouterr().err


def test_the_docs_table_is_what_the_code_computes() -> None:
    text = (ROOT / "docs" / "models.md").read_text()
    begin, end = "<!-- sizes-table:begin -->\n", "\n<!-- sizes-table:end -->"
    table = text[text.index(begin) + len(begin) : text.index(end)]
    assert table == sizes_cli.markdown_table(), "regenerate with: ckptbench sizes --table"
    assert "| llama3-8b | 8 | 11.22 / 13.09 | 89.7 / 104.7 |" in table
    assert "| mlperf-llama3-70b | 64 | 12.20 / 14.24 | 781.0 / 911.2 |" in table
