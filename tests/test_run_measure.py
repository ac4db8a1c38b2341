"""``ckptbench run``: procedures, the page cache setting, and outputs checked before the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptbench.workload.contract.choices import Procedure
from ckptbench.workload.local import cli as run_cli
from tests.workers import ckptbench

pytestmark = pytest.mark.timeout(180)

TINY = ["--layer-size", "50", "--padding-size", "4", "--world-size", "2"]


def _plan(*argv: str) -> run_cli.Plan:
    return run_cli.plan(run_cli.build_parser().parse_args(list(argv)))


@pytest.mark.parametrize(
    ("argv", "procedure", "samples", "warmup"),
    [
        ([], Procedure.CKPTBENCH, 8, 1),  # the same defaults as a cluster's (settings.py)
        (["--procedure", "reference"], Procedure.REFERENCE, 8, 0),
        (["--procedure", "mlperf"], Procedure.MLPERF, 10, 0),
        (["--procedure", "reference", "--samples", "5"], Procedure.REFERENCE, 5, 0),
    ],
)
def test_sample_counts_default_to_the_procedures_own(
    argv: list[str], procedure: Procedure, samples: int, warmup: int
) -> None:
    [config] = _plan(*argv).configs
    assert (config.procedure, config.samples, config.warmups) == (
        procedure,
        samples,
        warmup,
    )


def test_keep_cache_is_recorded(tmp_path: Path) -> None:
    [dropped] = _plan("--storage", str(tmp_path)).configs
    [kept] = _plan("--storage", str(tmp_path), "--keep-cache").configs
    assert (dropped.drop_cache, kept.drop_cache) == (True, False)
    assert run_cli.settings(kept, None)["cache"] == "kept"


@pytest.mark.parametrize("where", ["directory", "under-a-file"])
def test_json_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path, where: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = tmp_path if where == "directory" else blocker / "out.json"
    storage = tmp_path / "ckpt"
    proc = ckptbench("run", *TINY, "--storage", str(storage), "--json", str(target), timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert "--json" in proc.stderr and str(target) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not storage.exists()  # nothing ran


def test_a_json_file_that_can_be_written_is_left_alone_until_the_run_ends(tmp_path: Path) -> None:
    existing = tmp_path / "old.json"
    existing.write_text("{}")
    _plan("--json", str(existing))
    assert existing.read_text() == "{}"
    fresh = tmp_path / "new" / "out.json"
    _plan("--json", str(fresh))
    assert not fresh.exists()


@pytest.mark.parametrize(("procedure", "samples"), [("reference", 2), ("mlperf", 10)])
def test_procedures_run_and_are_recorded(tmp_path: Path, procedure: str, samples: int) -> None:
    out = tmp_path / "out.json"
    argv = [
        *TINY,
        "--storage",
        str(tmp_path / "ckpt"),
        "--procedure",
        procedure,
        "--json",
        str(out),
    ]
    if procedure == "reference":
        argv += ["--samples", str(samples)]
    proc = ckptbench("run", *argv, timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [run] = json.loads(out.read_text())["runs"]
    assert run["procedure"] == procedure
    assert run["extra"]["settings"]["procedure"] == procedure
    assert run["cache"] == "dropped"
    assert run["save"]["samples"] == samples and run["load"]["samples"] == samples
    assert len(run["save"]["rank_io_seconds"]) == 2
    assert run["save"]["rank0_mean_seconds"] > 0
    if procedure == "mlperf":
        assert run["mlperf"]["checkpoint_write_bw_gibps"] > 0
        assert run["save"]["span_mean_seconds"] > 0
        assert "load span (s)" in proc.stdout
    else:
        assert run["mlperf"] is None
        assert "load rank-0 mean (s)" in proc.stdout


def test_the_handicapped_gcsfs_baseline_is_an_option_and_recorded() -> None:
    fair, old = (_plan("--backend", "gcsfs", *extra).configs[0] for extra in ([], ["--sync-files"]))
    assert (fair.sync_files, old.sync_files) == (False, True)
    assert run_cli.settings(old, None)["sync_files"] is True
    assert run_cli.settings(fair, None)["sync_files"] is False
