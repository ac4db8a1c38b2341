"""Save mode ``process`` on the backends whose writers count their bytes (s3, s3fs, file): DCP
pickles the writer into its checkpointer process.

The writer's file system counts its bytes into the rank's traffic counter, which holds a lock: it
could not be pickled, so a process save failed on every backend whose writer counts that way (s3,
s3fs, file) before any byte moved. Sent to another process, the counter is that process's own.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from torch.distributed.checkpoint.filesystem import FileSystem

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.local.s3_server import S3Server
from ckptbench.workload.storage import traffic
from ckptbench.workload.storage.s3 import objects
from tests import workers
from tests.fault_proxy import FaultProxy, Rule

pytestmark = [pytest.mark.timeout(240)]


def test_a_counting_file_system_pickles_and_counts_where_it_lands() -> None:
    counted = traffic.CountingFileSystem(FileSystem())
    landed = pickle.loads(pickle.dumps(counted))
    assert landed._traffic is traffic.TRAFFIC  # this process's counter, not a copy


def _process_save_on_s3(bucket: str, backend: str, sample_count: int) -> WorkloadConfig:
    """A small model saved by DCP's checkpointer process, on the S3 server's ``bucket``."""
    return workers.small_config(
        f"s3://{bucket}/process",
        backend=backend,
        layer_size=300,
        padding_size=4,
        sample_count=sample_count,
        warmup_samples=0,
        save_mode="process",
        stager="default",
    )


@pytest.mark.parametrize("backend", ["s3", "s3fs"])
def test_process_saves_on_two_ranks_verify_and_leave_only_results(
    backend: str, s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    config = _process_save_on_s3(s3_bucket, backend, sample_count=2)
    ranks = workers.run(config, tmp_path, extra_env=s3_server.env(), timeout=200)
    for w in ranks:
        assert w.proc.returncode == 0, workers.logs(ranks)
        result = w.result
        assert result.error is None and result.verified is True, workers.logs(ranks)
        assert result.save is not None and result.save.background is not None
        assert result.checkpointer_peak_rss_bytes, workers.logs(ranks)
    assert objects.list_names(f"s3://{s3_bucket}/process/run/checkpoints") == []
    assert objects.unfinished_uploads(f"s3://{s3_bucket}/process") == []


def test_process_saves_on_files_verify(tmp_path: Path) -> None:
    config = workers.small_config(
        str(tmp_path / "ckpt"),
        sample_count=2,
        warmup_samples=0,
        save_mode="process",
        stager="default",
    )
    ranks = workers.run(config, tmp_path)
    for w in ranks:
        assert w.proc.returncode == 0, workers.logs(ranks)
        assert w.result.error is None and w.result.verified is True, workers.logs(ranks)
        assert w.result.checkpointer_peak_rss_bytes, workers.logs(ranks)


def test_the_checkpointer_process_retries_are_counted_in_the_ranks_log(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    # The checkpointer process inherits the rank's CRT log folder (s3/crt_log.py): its retries
    # of 503 SlowDown are reported by the rank, after the save they belong to.
    config = _process_save_on_s3(s3_bucket, "s3", sample_count=1)
    rule = Rule("status", "POST", times=2, statuses=(503,), s3_code="SlowDown")
    proxy = FaultProxy(s3_server.url, [rule], seed=7)
    with proxy.running():
        env = {**s3_server.env(), "AWS_ENDPOINT_URL": proxy.url}
        ranks = workers.run(config, tmp_path, extra_env=env, timeout=200)
    assert rule.fired == 2, (proxy.fired, workers.logs(ranks))
    for w in ranks:
        assert w.proc.returncode == 0 and w.result.verified is True, workers.logs(ranks)
    saves = [
        line
        for w in ranks
        for line in w.stderr.splitlines()
        if "] save of s3://" in line and "HTTP 503: Response code indicates throttling" in line
    ]
    assert sum(int(line.split(": ")[1].split()[0]) for line in saves) == 2, workers.logs(ranks)
