"""The workload configuration: env round trip, reference aliases, errors naming the variable."""

from __future__ import annotations

import pytest

from ckptbench.workload.contract.choices import Backend
from ckptbench.workload.contract.config import ConfigError, WorkloadConfig

GS = {"CKPTBENCH_CHECKPOINT_PATH": "gs://bucket/prefix"}


def test_defaults_match_the_reference() -> None:
    cfg = WorkloadConfig.from_env(GS)
    assert (cfg.layer_size, cfg.padding_size, cfg.samples) == (100_000, 196, 8)
    assert cfg.backend is Backend.GCS
    assert cfg.part_size_bytes == 32 * 1024**2 and cfg.threads == 8


def test_env_round_trip_keeps_everything_but_rank() -> None:
    cfg = WorkloadConfig(
        world_size=4,
        rank=2,
        layer_size=123,
        padding_size=8,
        sample_count=3,
        warmup_samples=0,
        backend=Backend.GCSFS,
        checkpoint_path="gs://bkt/p",
        run_id="bench-1",
        project="proj",
        async_save=True,
        verify=False,
        keep_checkpoints=True,
        threads=4,
        part_size_bytes=8 * 1024**2,
        seed=7,
        master_addr="r0.svc",
        master_port=1234,
        rendezvous_timeout_seconds=12.5,
        collective_timeout_seconds=99.0,
        termination_log=None,
    )
    env = cfg.to_env()
    assert "CKPTBENCH_RANK" not in env
    assert all(isinstance(v, str) for v in env.values())
    back = WorkloadConfig.from_env({**env, "JOB_COMPLETION_INDEX": "2"})
    assert back == cfg


def test_reference_aliases() -> None:
    cfg = WorkloadConfig.from_env(
        {
            "WORLD_SIZE": "4",
            "RANK": "1",
            "LAYER_SIZE": "1000",
            "PADDING_SIZE": "8",
            "SAMPLE_COUNT": "2",
            "CKPT_DIR_PATH": "gs://bkt/dir",
            "PROJECT": "my-proj",
            "USE_FSSPEC": "True",
        }
    )
    assert (cfg.world_size, cfg.rank, cfg.layer_size, cfg.padding_size) == (4, 1, 1000, 8)
    assert cfg.checkpoint_path == "gs://bkt/dir" and cfg.project == "my-proj"
    assert cfg.backend is Backend.GCSFS
    assert WorkloadConfig.from_env({**GS, "USE_FSSPEC": "false"}).backend is Backend.GCS


def test_our_names_win_over_the_reference_names() -> None:
    cfg = WorkloadConfig.from_env(
        {**GS, "CKPTBENCH_WORLD_SIZE": "2", "WORLD_SIZE": "8", "PADDING_SIZE": "8"}
    )
    assert cfg.world_size == 2


def test_rank_sources_in_order() -> None:
    env = {**GS, "CKPTBENCH_WORLD_SIZE": "4", "JOB_COMPLETION_INDEX": "3"}
    assert WorkloadConfig.from_env(env).rank == 3
    assert WorkloadConfig.from_env({**env, "RANK": "1"}).rank == 1
    assert WorkloadConfig.from_env({**env, "CKPTBENCH_RANK": "0"}).rank == 0


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"CKPTBENCH_WORLD_SIZE": "abc"}, ["CKPTBENCH_WORLD_SIZE", "integer", "'abc'"]),
        ({"WORLD_SIZE": "0"}, ["WORLD_SIZE", "greater than or equal to 1"]),
        ({"LAYER_SIZE": "-1"}, ["LAYER_SIZE"]),
        ({"SAMPLE_COUNT": "0"}, ["SAMPLE_COUNT"]),
        ({"CKPTBENCH_BACKEND": "azure"}, ["CKPTBENCH_BACKEND", "'azure'"]),
        ({"USE_FSSPEC": "maybe"}, ["USE_FSSPEC", "not a boolean"]),
        ({"CKPTBENCH_THREADS": "0"}, ["CKPTBENCH_THREADS"]),
        ({"CKPTBENCH_PART_SIZE_BYTES": "1024"}, ["CKPTBENCH_PART_SIZE_BYTES"]),
        ({"CKPTBENCH_MASTER_PORT": "70000"}, ["CKPTBENCH_MASTER_PORT"]),
        ({"CKPTBENCH_ASYNC_SAVE": "perhaps"}, ["CKPTBENCH_ASYNC_SAVE"]),
        ({"CKPTBENCH_RUN_ID": "../escape"}, ["CKPTBENCH_RUN_ID"]),
        ({"CKPTBENCH_WORLD_SIZE": "4", "RANK": "4"}, ["RANK", "below world_size"]),
        ({"CKPTBENCH_WORLD_SIZE": "8", "PADDING_SIZE": "4"}, ["PADDING_SIZE", "at least"]),
        ({"CKPTBENCH_BACKEND": "file"}, ["CKPTBENCH_CHECKPOINT_PATH", "backend file takes"]),
        ({"CKPTBENCH_CHECKPOINT_PATH": "gs://"}, ["CKPTBENCH_CHECKPOINT_PATH", "no bucket"]),
        # A file backend given another scheme wrote under ./s3:/b/x in the working directory.
        (
            {"CKPTBENCH_BACKEND": "file", "CKPTBENCH_CHECKPOINT_PATH": "azure://b/x"},
            [
                "CKPTBENCH_CHECKPOINT_PATH",
                "must be gs://bucket/prefix, s3://bucket/prefix, file:///path or an absolute",
            ],
        ),
        (
            {"CKPTBENCH_BACKEND": "file", "CKPTBENCH_CHECKPOINT_PATH": "http://h/x"},
            ["CKPTBENCH_CHECKPOINT_PATH", "must be gs://bucket/prefix"],
        ),
        (
            {"CKPTBENCH_BACKEND": "file", "CKPTBENCH_CHECKPOINT_PATH": "relative/dir"},
            ["CKPTBENCH_CHECKPOINT_PATH", "an absolute path"],
        ),
        ({"CKPTBENCH_CHECKPOINT_PATH": "gs:///x"}, ["CKPTBENCH_CHECKPOINT_PATH", "no bucket"]),
        (
            {"CKPTBENCH_PROCEDURE": "mlperf", "CKPTBENCH_WARMUP_SAMPLES": "1"},
            ["CKPTBENCH_WARMUP_SAMPLES", "no warm-up"],
        ),
        (
            {"CKPTBENCH_PROCEDURE": "mlperf", "CKPTBENCH_SAMPLE_COUNT": "8"},
            ["CKPTBENCH_SAMPLE_COUNT", "10 writes"],
        ),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], names: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        WorkloadConfig.from_env({**GS, **env})
    for name in names:
        assert name in str(err.value)


def test_missing_checkpoint_path_is_named() -> None:
    with pytest.raises(ConfigError, match="CKPTBENCH_CHECKPOINT_PATH"):
        WorkloadConfig.from_env({})


def test_gcs_backend_needs_a_gs_url() -> None:
    with pytest.raises(ConfigError, match=r"CKPT_DIR_PATH.*gs://"):
        WorkloadConfig.from_env({"CKPT_DIR_PATH": "/data"})


def test_empty_termination_log_disables_it() -> None:
    assert WorkloadConfig.from_env({**GS, "CKPTBENCH_TERMINATION_LOG": ""}).termination_log is None


def test_paths() -> None:
    cfg = WorkloadConfig.from_env(
        {
            "CKPTBENCH_BACKEND": "file",
            "CKPTBENCH_CHECKPOINT_PATH": "file:///data/",
            "CKPTBENCH_RUN_ID": "r1",
        }
    )
    assert cfg.run_path == "/data/r1"
    assert cfg.checkpoint_id(3) == "/data/r1/checkpoints/ckpt_3.ckpt"
    assert cfg.results_path == "/data/r1/results"
    gcs = WorkloadConfig.from_env({**GS, "CKPTBENCH_RUN_ID": "r1"})
    assert gcs.checkpoint_id(0) == "gs://bucket/prefix/r1/checkpoints/ckpt_0.ckpt"


def test_derived_sizes() -> None:
    cfg = WorkloadConfig.from_env(
        {**GS, "WORLD_SIZE": "4", "RANK": "3", "LAYER_SIZE": "10", "PADDING_SIZE": "6"}
    )
    assert not cfg.even_shards
    assert cfg.shard_bytes == 10 * 4000
    assert cfg.total_bytes == 6 * 10 * 4000


def test_model_settings_round_trip_through_the_environment() -> None:
    config = WorkloadConfig(
        checkpoint_path="/tmp/x", backend="file", world_size=4, model="llama3-8b", layers=2,
        vocab=1000, optimizer="none", dtype="bf16",
    )  # fmt: skip
    env = config.to_env()
    assert env["CKPTBENCH_MODEL"] == "llama3-8b" and env["CKPTBENCH_DTYPE"] == "bf16"
    assert "CKPTBENCH_LAYER_SIZE" not in env and "CKPTBENCH_PADDING_SIZE" not in env
    back = WorkloadConfig.from_env(env)
    assert back == config
    assert back.model_spec is not None and back.model_spec.describe() == (
        "llama3-8b (layers 2, vocab 1000), optimizer none, dtype bf16"
    )
    # The padding_size >= world_size rule is the reference layout's, not a model's.
    assert WorkloadConfig.from_env({**env, "CKPTBENCH_WORLD_SIZE": "512"}).world_size == 512


# A restore onto more ranks: one rank saves, two load.
_GROW = {
    "CKPTBENCH_MODEL": "llama3-8b",
    "CKPTBENCH_WORLD_SIZE": "1",
    "CKPTBENCH_LOAD_WORLD_SIZE": "2",
}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"CKPTBENCH_MODEL": "bert"},
            "CKPTBENCH_MODEL (model): String should match pattern '^(llama3-debug|",
        ),
        (
            {"CKPTBENCH_MODEL": "llama3-8b", "CKPTBENCH_LAYER_SIZE": "10"},
            "CKPTBENCH_MODEL (model): is exclusive with layer_size and padding_size",
        ),
        (
            {"CKPTBENCH_LAYERS": "2"},
            "CKPTBENCH_LAYERS (layers): needs model: it overrides a model preset's number of "
            "layers",
        ),
        ({"CKPTBENCH_MODEL": "llama3-8b", "CKPTBENCH_DTYPE": "fp8"}, "CKPTBENCH_DTYPE (dtype)"),
        ({"CKPTBENCH_MODEL": "llama3-8b", "CKPTBENCH_LAYERS": "0"}, "CKPTBENCH_LAYERS (layers)"),
        (
            {"CKPTBENCH_LOAD_WORLD_SIZE": "1"},
            "CKPTBENCH_LOAD_WORLD_SIZE (load_world_size): needs model: load_world_size ranks "
            "reshard the checkpoint world_size ranks saved",
        ),
        (
            {**_GROW, "CKPTBENCH_TRAIN_EVERY": "4"},
            "CKPTBENCH_TRAIN_EVERY (train_every): cannot be set with load_world_size above",
        ),
        (
            {**_GROW, "CKPTBENCH_RANK": "2"},
            "CKPTBENCH_RANK (rank): 2 must be below load_world_size 2",
        ),
    ],
)
def test_bad_model_settings_name_their_variable(env: dict[str, str], message: str) -> None:
    base = {"CKPTBENCH_CHECKPOINT_PATH": "/tmp/x", "CKPTBENCH_BACKEND": "file"}
    with pytest.raises(ConfigError) as info:
        WorkloadConfig.from_env({**base, **env})
    assert message in str(info.value)


def test_a_restore_onto_more_ranks_adds_ranks_that_load_only() -> None:
    base = {"CKPTBENCH_CHECKPOINT_PATH": "/tmp/x", "CKPTBENCH_BACKEND": "file"}
    saver = WorkloadConfig.from_env({**base, **_GROW, "CKPTBENCH_RANK": "0"})
    loader = WorkloadConfig.from_env({**base, **_GROW, "CKPTBENCH_RANK": "1"})
    assert saver.rank_count == loader.rank_count == 2
    assert saver.saves and saver.shard_bytes > 0
    # Rank 1 saves nothing, and loads its own rows of the 2-rank mesh (not rank 1 mod 1's).
    assert not loader.saves and loader.shard_bytes == 0
    assert loader.load_rank == 1 and loader.loader() is loader
    assert loader.describe_ranks() == "1 rank(s), loading on 2"


def test_model_sizes_of_a_rank_follow_torch_chunk() -> None:
    config = WorkloadConfig(
        checkpoint_path="/tmp/x", backend="file", world_size=3, model="llama3-debug",
        optimizer="none", rank=2,
    )  # fmt: skip
    # 2048-row embeddings over 3 ranks: 683, 683, 682 rows; 256-row norms: 86, 86, 84.
    assert config.shard_bytes < WorkloadConfig(
        checkpoint_path="/tmp/x", backend="file", world_size=3, model="llama3-debug",
        optimizer="none", rank=0,
    ).shard_bytes  # fmt: skip
    assert not config.even_shards
    assert config.total_bytes == 4 * 6_163_712


def test_unknown_prefixed_variables_are_named() -> None:
    from ckptbench.workload.contract.config import unknown_variables

    env = {
        **GS,
        "CKPTBENCH_SAMPLES": "3",  # misspelt: the setting is CKPTBENCH_SAMPLE_COUNT
        "CKPTBENCH_SAMPLE_COUNT": "3",
        "CKPTBENCH_OPERATOR_NAMESPACES": "a",  # the operator's own
        "OTHER": "x",
    }
    assert unknown_variables(env) == ["CKPTBENCH_SAMPLES"]
