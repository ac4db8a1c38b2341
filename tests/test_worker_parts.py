"""The worker's smaller parts: object I/O and its retries, rendezvous deadlines, environment, and a
whole world-size-1 run in this process."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.contract.results.rank import RankResult
from ckptbench.workload.contract.results.summaries import RunSummary
from ckptbench.workload.local.emulator import GcsEmulator, free_port
from ckptbench.workload.rank import loop, rendezvous, worker
from ckptbench.workload.rank.process import environment
from ckptbench.workload.storage import objects as objectio
from ckptbench.workload.storage.retry import GcsError, RetryPolicy, call_with_retry
from tests.workers import one_rank


def _api_error(name: str) -> Exception:
    # google-api-core's constructors are untyped: built by name keeps strict mypy quiet.
    cls = getattr(exceptions, name)
    error: Exception = cls(f"{name} from a test")
    return error


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (_api_error("TooManyRequests"), True),
        (_api_error("ServiceUnavailable"), True),
        (_api_error("InternalServerError"), True),
        (_api_error("Forbidden"), False),
        (_api_error("NotFound"), False),
    ],
)
def test_transient_errors_are_retried_with_growing_jittered_delays(
    error: Exception, retried: bool
) -> None:
    calls: list[int] = []
    sleeps: list[float] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise error
        return "done"

    if retried:
        assert call_with_retry(flaky, "test", sleep=sleeps.append) == "done"
        assert len(calls) == 4 and len(sleeps) == 3
        assert all(0 <= s <= 0.25 * 2**i for i, s in enumerate(sleeps))
    else:
        # The one policy wraps what it will not retry in an error naming the operation.
        with pytest.raises(GcsError, match=r"^test: ") as info:
            call_with_retry(flaky, "test", sleep=sleeps.append)
        assert isinstance(info.value.__cause__, type(error))
        assert len(calls) == 1 and sleeps == []


def test_retries_give_up_after_the_last_attempt() -> None:
    sleeps: list[float] = []

    def always() -> None:
        raise _api_error("TooManyRequests")

    with pytest.raises(GcsError, match="gave up after 3 attempts") as info:
        call_with_retry(always, "test", RetryPolicy(attempts=3), sleep=sleeps.append)
    assert isinstance(info.value.__cause__, exceptions.TooManyRequests)
    assert len(sleeps) == 2


def _populate_local(root: Path) -> None:
    for name in (".metadata", "__0_0.distcp", "__1_0.distcp", "__10_0.distcp"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)


def test_local_delete_by_rank_prefix_then_everything(tmp_path: Path) -> None:
    root = tmp_path / "ckpt_0.ckpt"
    _populate_local(root)
    assert objectio.delete_prefix(str(root), name_prefix="__1_") == 1
    assert objectio.list_names(str(root)) == [".metadata", "__0_0.distcp", "__10_0.distcp"]
    assert objectio.delete_prefix(f"file://{root}") == 3
    assert not root.exists()
    assert objectio.delete_prefix(str(root)) == 0


def test_gs_write_read_list_and_delete(
    gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EMULATOR_ENV, gcs_emulator.url)
    base = f"gs://{gcs_bucket}/run/checkpoints/ckpt_0.ckpt"
    for name in (".metadata", "__0_0.distcp", "__1_0.distcp", "__10_0.distcp"):
        objectio.write_text(f"{base}/{name}", name)
    objectio.write_text(f"gs://{gcs_bucket}/run/checkpoints/ckpt_0.ckpt2/x", "neighbour")
    assert objectio.read_text(f"{base}/__1_0.distcp") == "__1_0.distcp"
    assert objectio.delete_prefix(base, name_prefix="__1_") == 1
    assert objectio.list_names(base) == [".metadata", "__0_0.distcp", "__10_0.distcp"]
    assert objectio.delete_prefix(base) == 3
    assert objectio.list_names(base) == []
    # A folder is a prefix with a slash: ckpt_0.ckpt2 is not inside ckpt_0.ckpt.
    assert objectio.list_names(f"gs://{gcs_bucket}/run/checkpoints/ckpt_0.ckpt2") == ["x"]


def test_an_unresolvable_rank_0_name_times_out_naming_it() -> None:
    started = time.monotonic()
    with pytest.raises(rendezvous.RendezvousTimeout) as info:
        rendezvous.resolve("rank-0.nowhere.invalid", started + 1.5, started=started, port=29500)
    message = str(info.value)
    assert "rank-0.nowhere.invalid:29500 did not resolve within" in message
    assert time.monotonic() - started < 10


def test_rank_0_waits_for_missing_workers_until_the_deadline(tmp_path: Path) -> None:
    config = WorkloadConfig(
        checkpoint_path=str(tmp_path),
        backend="file",
        world_size=2,
        padding_size=2,
        master_port=free_port(),
        rendezvous_timeout_seconds=1.5,
    )
    with pytest.raises(rendezvous.RendezvousTimeout) as info:
        rendezvous.init_process_group(config, log=lambda _: None)
    message = str(info.value)
    assert f"rendezvous at 127.0.0.1:{config.master_port} timed out after" in message
    assert "not all 2 ranks reached rank 0's store" in message


def test_environment_records_versions_node_cpus_and_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODE_NAME", "node-a")
    config = WorkloadConfig(checkpoint_path=str(tmp_path), backend="file", threads=4, rank=0)
    described = environment.describe(config)
    assert described["node"] == "node-a"
    assert described["cpu_count"] >= 1
    assert set(described["versions"]) >= {"python", "torch", "gcsfs", "google-cloud-storage"}
    assert described["settings"]["threads"] == 4
    assert described["settings"]["part_size_bytes"] == 32 * 1024 * 1024
    assert "rank" not in described["settings"]
    json.dumps(described)


def test_the_rank_programs_imports_leave_gcsfs_unimported() -> None:
    """``worker.run`` sets gcsfs's HNS flag, which gcsfs reads when it is imported, after the
    worker's own imports: none of them may import gcsfs first."""
    code = "import sys, ckptbench.workload.rank.worker; print(sorted({'gcsfs'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_world_size_1_runs_end_to_end_in_this_process(tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    termination.touch()
    config = WorkloadConfig(
        checkpoint_path=str(tmp_path / "ckpt"),
        backend="file",
        world_size=1,
        layer_size=200,
        padding_size=2,
        sample_count=2,
        warmup_samples=0,
        master_port=free_port(),
        rendezvous_timeout_seconds=20,
        termination_log=str(termination),
    )
    assert worker.run(config) == 0
    result = RankResult.from_termination_message(termination.read_text())
    assert result.verified is True and result.error is None
    full = json.loads(objectio.read_text(f"{config.results_path}/rank-00000.json"))
    assert full["environment"]["settings"]["world_size"] == 1
    assert RankResult.model_validate(full).save == result.save
    summary = RunSummary.model_validate_json(
        objectio.read_text(f"{config.results_path}/summary.json")
    )
    assert summary.succeeded and summary.world_size == 1 and summary.total_bytes == 1_600_000


def test_a_rank_collects_its_garbage_before_it_leaves_its_process_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Manual collection leaves the run's cycles behind; freed after the group is gone, objects
    # that use it (device meshes) are torn down during interpreter shutdown.
    events: list[str] = []
    real_collect, real_destroy = gc.collect, rendezvous.destroy

    def collect(*args: int) -> int:
        events.append("collect")
        return real_collect(*args)

    def destroy() -> None:
        events.append("destroy")
        real_destroy()

    real_run = loop.run

    def run(*args: Any, **kwargs: Any) -> Any:
        result = real_run(*args, **kwargs)
        events.append("loop done")
        return result

    config = one_rank(tmp_path, master_port=free_port(), termination_log="")
    monkeypatch.setattr(gc, "collect", collect)
    monkeypatch.setattr(rendezvous, "destroy", destroy)
    monkeypatch.setattr(loop, "run", run)
    assert worker.run(config) == 0
    assert events[events.index("loop done") :] == ["loop done", "collect", "destroy"], events
