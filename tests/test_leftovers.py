"""What a run cannot delete is counted and the command that removes it named (issue 33, item 3).

Found: with every DELETE refused, a run left 26 objects and said nothing of them or of
``ckptbench clean``. Here credentials that may write but not delete (the store answers 403 to
every DELETE but the storage check's own) make a 2-rank run fail at its first cleanup; the table,
the rank's log and ``results/summary.json`` each say how many objects stay under the run's folder
and that ``ckptbench clean <folder>`` removes them, and the count is what the bucket holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.cloud import storage

from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.contract.results.rank import Leftovers
from ckptbench.workload.local.emulator import GcsEmulator
from tests.fault_proxy import FaultProxy, Rule

pytestmark = [pytest.mark.timeout(240)]


def _cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", *argv],
        capture_output=True,
        text=True,
        timeout=200,
        env={**os.environ, **env},
    )


def test_leftovers_of_a_run_whose_deletes_all_fail_are_counted_and_clean_is_named(
    gcs_emulator: GcsEmulator, gcs_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refuse = Rule(
        "status", "DELETE", url_excludes="ckptbench-preflight", times=None, statuses=(403,)
    )
    storage_url = f"gs://{gcs_bucket}/p"
    out = tmp_path / "run.json"
    proxy = FaultProxy(gcs_emulator.url, [refuse])
    with proxy.running():
        proc = _cli(
            {EMULATOR_ENV: proxy.url},
            "run",
            *("--storage", storage_url, "--backend", "gcs", "--world-size", "2"),
            *("--layer-size", "10", "--padding-size", "2", "--samples", "1"),
            *("--json", str(out)),
        )
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert refuse.fired > 0
    monkeypatch.setenv(EMULATOR_ENV, gcs_emulator.url)
    client = storage.Client(project="x", client_options={"api_endpoint": gcs_emulator.url})
    names = [b.name for b in client.list_blobs(gcs_bucket)]
    stored = [n for n in names if "/checkpoints/" in n]
    assert stored, names
    (run,) = json.loads(out.read_text())["runs"]
    run_folder = stored[0].split("/checkpoints/")[0]
    expected = Leftovers(objects=len(stored), under=f"gs://{gcs_bucket}/{run_folder}")
    notice = expected.notice()
    assert f"remove them with `ckptbench clean gs://{gcs_bucket}/{run_folder}`" in notice
    # The local table (and --json), the rank's log and the summary the ranks wrote agree.
    assert Leftovers.model_validate(run["left"]) == expected, run
    assert notice in proc.stdout, proc.stdout[-3000:]
    assert "[rank 0] " in proc.stderr and notice in proc.stderr, proc.stderr[-3000:]
    summary = client.bucket(gcs_bucket).blob(f"{run_folder}/results/summary.json")
    assert Leftovers.model_validate(json.loads(summary.download_as_text())["left"]) == expected
    # And the command named removes them.
    cleaned = _cli({EMULATOR_ENV: gcs_emulator.url}, "clean", expected.under)
    assert cleaned.returncode == 0, cleaned.stderr
    assert not [b.name for b in client.list_blobs(gcs_bucket) if "/checkpoints/" in b.name]
