"""A checkpoint whose ``.metadata`` is unreadable fails its load by name (issue 33, item 5).

Found: loading a checkpoint whose ``.metadata`` was truncated or garbled printed DCP's fallback
traceback on the terminal. Here rank 0 garbles it between the save and the load; every rank must
fail the load saying which file is unreadable, with no traceback in any rank's output, and the
local table must report it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptbench.workload.contract.results.figures import summarize
from ckptbench.workload.local.report import failure_lines
from tests import workers

pytestmark = [pytest.mark.timeout(240)]


@pytest.mark.parametrize("backend", ["file", "gcs"])
def test_a_garbled_metadata_fails_the_load_by_name_without_a_traceback(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    extra_env: dict[str, str] = {}
    if backend == "file":
        path = f"file://{tmp_path}/ckpt"
    else:
        emulator = request.getfixturevalue("gcs_emulator")
        bucket = request.getfixturevalue("gcs_bucket")
        path = f"gs://{bucket}/meta"
        extra_env["STORAGE_EMULATOR_HOST"] = emulator.url
    config = workers.small_config(path, backend=backend, sample_count=1, warmup_samples=0)
    command = [*workers.WORKER[:1], "-m", "tests.workers", "garble-metadata", "0"]
    ranks = workers.run(config, tmp_path, command=command, extra_env=extra_env)
    metadata = f"{config.checkpoint_id(0)}/.metadata"
    for w in ranks:
        assert w.proc.returncode == 1, workers.logs(ranks)
        error = w.result.error or ""
        named = f"MetadataUnreadable: checkpoint metadata at {metadata} is unreadable: "
        assert error.startswith(named), workers.logs(ranks)
        assert "Traceback" not in w.stderr, workers.logs(ranks)  # where logging writes
    # The local table's failure lines name it for each rank.
    summary = summarize([w.result for w in ranks], config.world_size, config.total_bytes)
    lines = failure_lines("cell", summary)
    assert len(lines) == 2 and all(f"checkpoint metadata at {metadata}" in x for x in lines), lines
