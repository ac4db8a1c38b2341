"""The file backend's storage is checked before any rank works (issue 21).

Found: ``CKPTBENCH_BACKEND=file CKPTBENCH_CHECKPOINT_PATH=s3://b/x ckptbench worker`` exited 0
and wrote ``./s3:/b/x/...`` under the working directory; a worker given a file or /proc as its
folder ran the whole loop and failed at the end without naming the setting.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from ckptbench.workload.contract.results.rank import RankResult
from ckptbench.workload.local.options import UsageError, build_parser
from ckptbench.workload.local.plan import plan
from tests import workers
from tests.workers import small_config

TINY = ["--layer-size", "100", "--padding-size", "2", "--samples", "1", "--warmup", "0"]


@pytest.mark.parametrize("url", ["gs://bucket/x", "s3://b/x", "http://h/x"])
def test_the_file_backend_refuses_a_url_of_another_scheme(url: str) -> None:
    with pytest.raises(ValidationError) as err:
        small_config(url, backend="file")
    assert "checkpoint_path" in str(err.value)


def test_the_file_backend_names_the_scheme_it_refuses() -> None:
    # gs:// passes the path's shape; the per-backend rule is what refuses it for file.
    with pytest.raises(ValidationError, match=r"backend file takes .* not a gs:// URL"):
        small_config("gs://bucket/x", backend="file")


@pytest.mark.parametrize("url", ["file:///tmp/ckb", "/tmp/ckb"])
def test_the_file_backend_takes_a_path_or_a_file_url(url: str) -> None:
    assert small_config(url, backend="file").checkpoint_path == url


@pytest.mark.parametrize("storage", ["s3://b/x", "http://h/x", "gs://bucket/x"])
def test_the_runner_refuses_a_foreign_storage_url_naming_storage(
    tmp_path: Path, storage: str
) -> None:
    with pytest.raises(UsageError, match="--storage"):
        plan(build_parser().parse_args(["--storage", storage, "--backend", "file", *TINY]))


def _worker(tmp_path: Path, checkpoint_path: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    env = workers.base_env()
    log = tmp_path / "termination-log"
    log.write_text("")
    env.update(
        CKPTBENCH_BACKEND="file",
        CKPTBENCH_CHECKPOINT_PATH=checkpoint_path,
        CKPTBENCH_LAYER_SIZE="100",
        CKPTBENCH_PADDING_SIZE="2",
        CKPTBENCH_TERMINATION_LOG=str(log),
        # Nobody listens here: a worker that got past its checks would wait for its peers.
        CKPTBENCH_WORLD_SIZE="2",
        CKPTBENCH_MASTER_ADDR="127.0.0.1",
        CKPTBENCH_MASTER_PORT="9",
        CKPTBENCH_RENDEZVOUS_TIMEOUT_SECONDS="30",
    )
    proc = subprocess.run(
        workers.WORKER, cwd=workers.ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    return proc, log


@pytest.mark.parametrize("url", ["s3://b/x", "http://h/x"])
def test_a_worker_given_a_foreign_url_exits_2_and_writes_nothing(tmp_path: Path, url: str) -> None:
    proc, _ = _worker(tmp_path, url)
    assert proc.returncode == 2, proc.stderr
    assert "CKPTBENCH_CHECKPOINT_PATH (checkpoint_path)" in proc.stderr
    scheme = url.split("://")[0]
    assert not (workers.ROOT / f"{scheme}:").exists()


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("{tmp}/afile", "'{tmp}/afile' is not a directory"),
        ("{tmp}/afile/below", "lies under '{tmp}/afile', which is not a directory"),
        ("/proc/ckb", "cannot create folders in '/proc'"),
    ],
)
def test_a_worker_whose_folder_cannot_take_files_is_refused_before_the_rendezvous(
    tmp_path: Path, path: str, says: str
) -> None:
    (tmp_path / "afile").write_text("")
    proc, log = _worker(tmp_path, path.format(tmp=tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "refused: CKPTBENCH_CHECKPOINT_PATH (checkpointPath): " in proc.stderr
    assert says.format(tmp=tmp_path) in proc.stderr
    assert "rendezvous" not in proc.stderr.lower()
    error = RankResult.from_termination_message(log.read_text()).error or ""
    assert error.startswith("StorageRefused: CKPTBENCH_CHECKPOINT_PATH (checkpointPath): ")
    assert says.format(tmp=tmp_path) in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "termination-log"]
