"""``ckptbench run`` with model presets: options, exclusivity, and the memory check up front."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ckptbench.workload.contract.checkpoint.models import DtypeProfile, Optimizer
from ckptbench.workload.local import cli as run_cli
from ckptbench.workload.rank.process import memory

GIB = 1024**3
ROOT = Path(__file__).resolve().parent.parent


def _plan(*argv: str) -> run_cli.Plan:
    return run_cli.plan(run_cli.build_parser().parse_args(list(argv)))


@pytest.fixture
def memory_of_machine(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """What the plan reads as this machine's available memory (set by each test)."""
    box = [64 * GIB]
    monkeypatch.setattr(memory, "available_bytes", lambda: box[0])
    return box


def test_model_options_set_the_config_and_drop_the_reference_sizes(
    tmp_path: Path, memory_of_machine: list[int]
) -> None:
    p = _plan("--storage", str(tmp_path), "--model", "llama3-debug", "--layers", "2",
              "--vocab", "512", "--optimizer", "none", "--dtype", "bf16")  # fmt: skip
    [config] = p.configs
    assert (config.model, config.layers, config.vocab) == ("llama3-debug", 2, 512)
    assert config.optimizer is Optimizer.NONE and config.dtype is DtypeProfile.BF16
    assert "layer_size" not in config.model_fields_set
    assert "CKPTBENCH_LAYER_SIZE" not in config.to_env()


def test_models_as_a_comma_list_are_cells(tmp_path: Path, memory_of_machine: list[int]) -> None:
    p = _plan("--storage", str(tmp_path), "--model", "llama3-debug", "--dtype", "fp32,mlperf")
    assert [c.axes for c in p.cells] == [{"dtype": "fp32"}, {"dtype": "mlperf"}]


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--model", "bert"], ["--model", "should match pattern", "llama3-debug", "gpt2"]),
        (["--model", "llama3-8b", "--layer-size", "10"], ["--model", "--layer-size", "exclusive"]),
        (["--layers", "2"], ["--layers", "needs --model"]),
        (["--model", "llama3-8b", "--dtype", "fp8"], ["--dtype", "'fp8'"]),
        (["--model", "llama3-8b", "--optimizer", "sgd"], ["--optimizer", "'sgd'"]),
    ],
)
def test_bad_model_options_name_the_option(
    tmp_path: Path, memory_of_machine: list[int], argv: list[str], names: list[str]
) -> None:
    with pytest.raises(run_cli.UsageError) as info:
        _plan("--storage", str(tmp_path), *argv)
    for name in names:
        assert name in str(info.value)


def test_the_reference_table_is_refused_up_front_on_a_small_machine(
    tmp_path: Path, memory_of_machine: list[int]
) -> None:
    memory_of_machine[0] = 16 * GIB
    argv = ["--storage", str(tmp_path), "--world-size", "4", "--layer-size", "100000",
            "--padding-size", "196"]  # fmt: skip
    # Through the plan only: were the check broken, main() would start 18 GiB ranks.
    with pytest.raises(run_cli.UsageError) as info:
        _plan(*argv)
    text = str(info.value)
    # 49 tensors of 400 MB on rank 0: 18.25 GiB, against 16 GiB / 4 ranks.
    assert text.startswith("--world-size 4: a rank needs about")
    assert "shard or load template 18.25 GiB" in text
    assert "but has 4.00 GiB (16.00 GiB available on this machine / 4 ranks)" in text
    assert "no --world-size fits" in text and "--force" in text
    [config] = _plan(*argv, "--force").configs
    assert config.memory_check is False


def test_a_refused_run_exits_2_before_starting_any_rank(
    tmp_path: Path, memory_of_machine: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    memory_of_machine[0] = 200 * 1024**2  # a tiny run, harmless if the check let it through
    argv = ["--storage", str(tmp_path), "--model", "llama3-debug", "--layers", "1",
            "--world-size", "2", "--samples", "1", "--warmup", "0"]  # fmt: skip
    assert run_cli.main(argv) == 2
    assert "--world-size 2: a rank needs about" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing was started or written


def test_the_refusal_names_the_largest_world_size_that_fits(
    tmp_path: Path, memory_of_machine: list[int]
) -> None:
    base = ["--storage", str(tmp_path), "--model", "llama3-8b", "--layers", "1",
            "--vocab", "32768"]  # fmt: skip
    memory_of_machine[0] = 1 << 50
    [at8] = _plan(*base, "--world-size", "8").configs
    # Just short of what 8 ranks need; 7 ranks need less in all (one interpreter fewer).
    memory_of_machine[0] = 8 * at8.memory_estimate().peak_bytes - 8
    with pytest.raises(run_cli.UsageError) as info:
        _plan(*base, "--world-size", "8")
    assert "--world-size 7 fits on this machine; use fewer --layers" in str(info.value)
    memory_of_machine[0] = 8 * GIB
    with pytest.raises(run_cli.UsageError) as info:
        _plan(*base, "--world-size", "8")
    text = str(info.value)
    k = int(text.split(" fits on this machine")[0].rsplit("--world-size ", 1)[1])
    assert 1 <= k < 8
    _plan(*base, "--world-size", str(k))  # fits
    with pytest.raises(run_cli.UsageError):
        _plan(*base, "--world-size", str(k + 1))


def test_unknown_available_memory_skips_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda: None)
    p = _plan("--storage", str(tmp_path), "--world-size", "4", "--layer-size", "100000",
              "--padding-size", "196")  # fmt: skip
    assert p.configs[0].memory_check is True  # not forced: there was nothing to compare with


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_with_a_model_preset_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    argv = ["--model", "llama3-debug", "--layers", "1", "--world-size", "2", "--samples", "1",
            "--warmup", "0", "--storage", str(tmp_path / "ckpt"), "--json", str(out)]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "run", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=280, env={"OMP_NUM_THREADS": "1",
        "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "llama3-debug (layers 1), optimizer adamw, dtype fp32" in proc.stderr
    [run] = json.loads(out.read_text())["runs"]
    settings = run["extra"]["settings"]
    assert settings["model"] == "llama3-debug" and settings["layers"] == 1
    assert "layer_size" not in settings
    assert run["verified"] is True
    # 1 layer: 2 x 2048 x 256 embeddings + 851,968 layer params + 256 norm, 12 B each + steps.
    params = 2 * 2048 * 256 + 4 * 256 * 256 + 3 * 768 * 256 + 2 * 256 + 256
    assert run["total_bytes"] == 12 * params + 4 * 12
