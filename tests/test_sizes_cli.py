"""``ckptbench sizes``: printed figures, errors naming the option, and the docs table in sync."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ckptbench import cli
from ckptbench.workload.contract.checkpoint import models
from ckptbench.workload.contract.checkpoint.memory_plan import BASELINE_BYTES
from ckptbench.workload.contract.choices import Backend
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


def test_sizes_crosses_its_lists_with_the_sweeps_expander(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["--model", "llama3-8b,llama3-70b", "--world-size", "8,64,512", "--json"]
    assert sizes_cli.main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    # In the settings' declared order, the last varying fastest, as ckptbench run's cells.
    assert [(r["model"], r["world_size"]) for r in rows] == [
        (model, n) for n in (8, 64, 512) for model in ("llama3-8b", "llama3-70b")
    ]
    monkeypatch.setattr(sizes_cli, "MAX_REPORTS", 5)
    assert sizes_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--world-size 3 x --model 2: 6 cells, more than the 5 one ckptbench sizes" in err
    assert sizes_cli.main(["--world-size", "8,64,8"]) == 2
    assert "--world-size: '8' is listed twice" in capsys.readouterr().err


def test_sizes_rejects_a_bad_override_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert sizes_cli.main(["--model", "llama3-8b", "--layers", "0"]) == 2
    # Validated as ckptbench run validates it, in the same words.
    assert "--layers: Input should be greater than or equal to 1 (got 0)" in capsys.readouterr().err


def _rows(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    assert sizes_cli.main([*argv, "--json"]) == 0, capsys.readouterr().err
    rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return rows


def test_the_process_checkpointer_and_its_staging_copy_raise_the_estimate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ("--model", "llama3-8b", "--backend", "file", "--world-size", "8")
    sync, thread, process = _rows(capsys, *argv, "--save-mode", "sync,thread,process")
    assert [r["memory_settings"]["save_mode"] for r in (sync, thread, process)] == [
        "sync",
        "thread",
        "process",
    ]
    shard = sync["largest_rank_bytes"]
    assert sync["memory_staging_bytes_estimate"] == 0
    assert sync["memory_checkpointer_bytes_estimate"] == 0
    # The thread checkpointer stages a copy of the shard; the process one besides moves each
    # staged tensor into shared memory (one more item) and runs a second interpreter (file: no
    # write buffers).
    assert thread["memory_staging_bytes_estimate"] == shard
    assert thread["memory_checkpointer_bytes_estimate"] == 0
    item = models.model_sizes(models.ModelSpec("llama3-8b"), 8).largest_item_bytes
    assert process["memory_staging_bytes_estimate"] == shard + item
    assert process["memory_checkpointer_bytes_estimate"] == BASELINE_BYTES[Backend.FILE]
    # llama3-8b's save phase is the larger: the peak moves by the plan's figures.
    assert process["memory_peak_bytes_estimate"] - thread["memory_peak_bytes_estimate"] == (
        item + BASELINE_BYTES[Backend.FILE]
    )
    assert thread["memory_peak_bytes_estimate"] > sync["memory_peak_bytes_estimate"] + shard


def test_sizes_prints_the_staging_copy_and_the_checkpointer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--model", "llama3-debug", "--world-size", "2", "--save-mode", "process"]
    assert sizes_cli.main([*argv, "--stager", "default", "--staging-shared-memory"]) == 0
    out = capsys.readouterr().out
    assert "save mode        process, stager default into shared memory" in out
    assert "checkpointer     3" in out and "a second process per rank" in out
    assert "+ checkpointer process " in out
    shared = _rows(capsys, *argv, "--stager", "default", "--staging-shared-memory")[0]
    # Staged into shared memory: the checkpointer receives those pages, no further copy.
    assert shared["memory_staging_bytes_estimate"] == shared["largest_rank_bytes"]


def test_a_stager_option_without_its_stager_is_refused_by_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert sizes_cli.main(["--save-mode", "process", "--staging-shared-memory"]) == 2
    err = capsys.readouterr().err
    assert "--stager: must be default with --staging-shared-memory" in err, err
    assert "options of DCP's DefaultStager" in err, err


def test_the_training_step_counts_in_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = _rows(
        capsys, "--model", "llama3-debug", "--train-every", "10", "--train-matrix", "512"
    )
    assert row["memory_train_bytes_estimate"] == 3 * 512 * 512 * 4


def test_the_docs_table_is_what_the_code_computes() -> None:
    text = (ROOT / "docs" / "models.md").read_text()
    begin, end = "<!-- sizes-table:begin -->\n", "\n<!-- sizes-table:end -->"
    table = text[text.index(begin) + len(begin) : text.index(end)]
    assert table == sizes_cli.markdown_table(), "regenerate with: ckptbench sizes --table"
    assert "| llama3-8b | 8 | 11.22 / 13.09 | 89.7 / 104.7 |" in table
    assert "| mlperf-llama3-70b | 64 | 12.20 / 14.24 | 781.0 / 911.2 |" in table
