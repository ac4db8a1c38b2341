"""Real worker processes over real gloo and DCP, on a local folder and on a real GCS emulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.names import EMULATOR_ENV
from ckptbench.workload.contract.results.summaries import RunSummary
from ckptbench.workload.local.emulator import GcsEmulator
from ckptbench.workload.storage import objects as objectio
from tests import workers
from tests.workers import small_config

pytestmark = pytest.mark.timeout(180)

BACKENDS = ["file", "gcsfs", "gcs"]


def _storage(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str | None]:
    if backend == "file":
        return str(tmp_path / "ckpt"), None
    emulator: GcsEmulator = request.getfixturevalue("gcs_emulator")
    bucket: str = request.getfixturevalue("gcs_bucket")
    # This process reads results back through the same emulator.
    monkeypatch.setenv(EMULATOR_ENV, emulator.url)
    return f"gs://{bucket}/bench", emulator.url


def _summary(config: WorkloadConfig) -> RunSummary:
    return RunSummary.model_validate_json(objectio.read_text(f"{config.results_path}/summary.json"))


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("backend", BACKENDS)
def test_ranks_save_load_verify_report_and_clean_up(
    backend: str,
    world_size: int,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, emulator_url = _storage(backend, tmp_path, request, monkeypatch)
    # 2 * world_size + 1 tensors: uneven shards, so rank 0 carries one more than the others.
    # Four ranks share two cores here: they skip the warm-up to keep the suite quick.
    warmups = 1 if world_size == 2 else 0
    config = small_config(
        path,
        backend=backend,
        world_size=world_size,
        padding_size=2 * world_size + 1,
        warmup_samples=warmups,
    )
    ranks = workers.run(config, tmp_path, emulator_url=emulator_url)
    assert [w.proc.returncode for w in ranks] == [0] * world_size, workers.logs(ranks)

    for w in ranks:
        result = w.result
        assert result.rank == w.rank
        assert result.error is None and result.verified is True
        assert result.bytes == (3 if w.rank == 0 else 2) * 1000 * 1000 * 4
        assert result.save is not None and result.load is not None
        assert result.save.seconds is not None and len(result.save.seconds) == 2
        assert result.load.io_seconds is not None and len(result.load.io_seconds) == 2
        assert result.save.blocked is None
    rank0 = ranks[0].stderr
    for line in ("save 1/2:", "load 2/2:"):
        assert f"[rank 0] {line}" in rank0, rank0
    assert ("[rank 0] save warm-up 1/1:" in rank0) == (warmups == 1)
    assert "verified: True; summary in" in rank0
    assert "save 1/2" not in ranks[1].stderr  # only rank 0 reports progress

    summary = _summary(config)
    assert summary.world_size == world_size and summary.ranks_reported == world_size
    assert summary.total_bytes == config.total_bytes == (2 * world_size + 1) * 4_000_000
    assert summary.shard_bytes == 12_000_000
    assert summary.verified is True and summary.succeeded
    assert summary.save is not None and summary.save.samples == 2
    assert summary.extra["settings"]["backend"] == backend
    assert summary.extra["versions"]["torch"].startswith("2.13")
    assert summary.extra["torch_threads"] == 1  # the OMP_NUM_THREADS the ranks were given

    names = objectio.list_names(config.results_path)
    assert names == [f"rank-{r:05d}.json" for r in range(world_size)] + ["summary.json"]
    # Every sample's checkpoint, any warm-up's included, is gone.
    assert objectio.list_names(f"{config.run_path}/checkpoints") == []


def test_async_save_reports_blocked_and_durable_times_and_keeps_checkpoints(
    tmp_path: Path,
) -> None:
    config = small_config(str(tmp_path / "ckpt"), async_save=True, keep_checkpoints=True)
    ranks = workers.run(config, tmp_path)
    assert [w.proc.returncode for w in ranks] == [0, 0], workers.logs(ranks)
    for w in ranks:
        save = w.result.save
        assert save is not None and save.blocked is not None and save.blocked_seconds
        assert save.seconds is not None
        # Durable comes after the call returned.
        assert all(b <= s for b, s in zip(save.blocked_seconds, save.seconds, strict=True))
    assert ", blocked " in ranks[0].stderr
    summary = _summary(config)
    assert summary.save is not None and summary.save.stall is not None
    assert summary.save.background is not None
    for sample in range(3):
        names = objectio.list_names(config.checkpoint_id(sample))
        assert names == [".metadata", "__0_0.distcp", "__1_0.distcp"]


def test_the_process_checkpointer_saves_beside_training_and_is_stopped(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # gcs: the writer's storage client cannot be pickled; the checkpointer process makes its own.
    path, emulator_url = _storage("gcs", tmp_path, request, monkeypatch)
    config = small_config(
        path,
        backend="gcs",
        save_mode="process",
        stager="default",
        staging_shared_memory=True,
        warmup_samples=0,
        train_every=2,
        train_matrix=64,
    )
    ranks = workers.run(config, tmp_path, emulator_url=emulator_url)
    assert [w.proc.returncode for w in ranks] == [0, 0], workers.logs(ranks)
    for w in ranks:
        result = w.result
        assert result.verified is True and result.save is not None and result.train is not None
        assert result.save.blocked is not None and result.save.background is not None
        assert result.train.stall.n == config.samples
        # The checkpointer process ran, was measured, and was stopped with the rank.
        assert result.checkpointer_peak_rss_bytes and result.resources is not None
        assert result.resources.peak_rss_bytes
    summary = _summary(config)
    assert summary.train is not None and summary.checkpointer_peak_rss_bytes is not None
    assert summary.save is not None and summary.save.stall is not None


def test_a_corrupted_shard_fails_verification_naming_tensor_and_rank(tmp_path: Path) -> None:
    config = small_config(str(tmp_path / "ckpt"), padding_size=8)
    command = [*workers.WORKER[:1], "-m", "tests.workers", "corrupt", "1", "dummy_tensor_5"]
    ranks = workers.run(config, tmp_path, command=command)
    assert [w.proc.returncode for w in ranks] == [1, 1], workers.logs(ranks)
    bad = ranks[1].result
    assert bad.verified is False
    assert bad.error is not None
    assert bad.error.startswith("VerificationError: dummy_tensor_5 on rank 1: dummy_tensor_5: 1 of")
    peer = ranks[0].result
    assert peer.error == "PeerFailure: rank 1 failed during verify; stopping with it"
    # The warm-up verified; the first timed sample did not, so it has its save and load times.
    assert bad.save is not None and bad.save.stats.n == 1
    summary = _summary(config)
    assert summary.verified is False and summary.error_count == 2
    assert not summary.succeeded


def test_a_missing_shard_object_fails_the_load_naming_it(
    tmp_path: Path, gcs_emulator: GcsEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EMULATOR_ENV, gcs_emulator.url)
    config = small_config(f"gs://{gcs_bucket}/bench", backend="gcsfs")
    command = [*workers.WORKER[:1], "-m", "tests.workers", "delete", "1"]
    ranks = workers.run(config, tmp_path, command=command, emulator_url=gcs_emulator.url)
    assert [w.proc.returncode for w in ranks] == [1, 1], workers.logs(ranks)
    for w in ranks:
        error = w.result.error or ""
        assert error.startswith("CheckpointFailure: load failed on rank 1: "), error
        assert "__1_0.distcp" in error
        assert w.result.verified is None  # not every load was checked
    assert "__1_0.distcp" in ranks[0].stderr


def test_the_emulator_stopping_mid_run_fails_every_rank_clearly_without_hanging(
    tmp_path: Path,
) -> None:
    import time

    backend = "gcs"
    with GcsEmulator() as emulator:
        emulator.create_bucket("doomed")
        config = small_config(
            "gs://doomed/bench",
            backend=backend,
            sample_count=50,
            warmup_samples=0,
            collective_timeout_seconds=60,
        )
        ranks = workers.spawn(config, tmp_path, emulator_url=emulator.url)
        try:
            deadline = time.monotonic() + 60
            while "[rank 0] load 1/50:" not in ranks[0].stderr:
                assert time.monotonic() < deadline, workers.logs(ranks)
                assert ranks[0].proc.poll() is None, workers.logs(ranks)
                time.sleep(0.05)
            emulator.stop()
            stopped = time.monotonic()
            workers.wait(ranks, timeout=90)
        finally:
            workers.stop(ranks)
    took = time.monotonic() - stopped
    assert [w.proc.returncode for w in ranks] == [1, 1], workers.logs(ranks)
    for w in ranks:
        result = w.result
        assert result.error is not None
        assert result.save is not None and 1 <= result.save.stats.n < 50
    errors = " ".join(w.result.error or "" for w in ranks)
    assert "failed on rank" in errors or "onnect" in errors, errors
    assert took < 80


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("CKPTBENCH_WORLD_SIZE", "abc", "CKPTBENCH_WORLD_SIZE (world_size)"),
        ("LAYER_SIZE", "-1", "LAYER_SIZE (layer_size)"),
        ("CKPTBENCH_BACKEND", "azure", "CKPTBENCH_BACKEND (backend)"),
    ],
)
def test_a_bad_configuration_value_exits_2_naming_the_variable(
    tmp_path: Path, variable: str, value: str, named: str
) -> None:
    import subprocess

    env = workers.base_env()
    env["CKPTBENCH_CHECKPOINT_PATH"] = str(tmp_path)
    env["CKPTBENCH_BACKEND"] = "file"
    env[variable] = value
    proc = subprocess.run(
        workers.WORKER, cwd=workers.ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("invalid configuration: " + named), proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""  # the message, nothing else


def test_worker_help_lists_the_variables_it_reads() -> None:
    import subprocess

    proc = subprocess.run(
        [*workers.WORKER, "--help"], env=workers.base_env(), capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0
    for name in WorkloadConfig.model_fields:
        assert f"CKPTBENCH_{name.upper()}" in proc.stdout
    assert "(also RANK, JOB_COMPLETION_INDEX)" in proc.stdout


def test_rendezvous_without_rank_0_times_out_with_a_clear_message(tmp_path: Path) -> None:
    import time

    config = small_config(str(tmp_path / "ckpt"), rendezvous_timeout_seconds=2)
    started = time.monotonic()
    (w,) = workers.run(config, tmp_path, ranks=[1], timeout=30)
    took = time.monotonic() - started
    assert w.proc.returncode == 1
    error = w.result.error or ""
    assert error.startswith(
        f"RendezvousTimeout: rendezvous at 127.0.0.1:{config.master_port} timed out after 2."
    ), error
    assert "rank 0 did not answer" in error
    assert took < 20
    assert "Traceback" not in w.stderr and "frame #" not in w.stderr
