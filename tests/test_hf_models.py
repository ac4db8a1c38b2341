"""Hugging Face models from their config.json: the pure sizes against the published counts and
against transformers' own build, the state FSDP2 shards with AdamW, refusals, and real runs."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from ckptbench.workload.contract.checkpoint import hf_shapes, memory_plan, models
from ckptbench.workload.contract.choices import Backend
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results.rank import RankResult
from ckptbench.workload.local import sizes_cli
from ckptbench.workload.rank import hf_meta, model_state
from tests import workers
from tests.workers import small_config

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(hf_shapes.SHIPPED)


def _count(spec: models.ModelSpec) -> int:
    return sum(p.numel for p in models.model_parameters(spec))


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_config_counts_its_published_parameters(name: str) -> None:
    shipped = hf_shapes.SHIPPED[name]
    ours = _count(models.ModelSpec(name))
    ratio = ours / shipped.published_params
    assert abs(ratio - 1) <= 0.005, f"{name}: {ours:,} against {shipped.source}"


def test_the_exact_counts_are_pinned() -> None:
    # Sums of the shapes (docs/models.md shows them); vit-base's equals torchvision's vit_b_16.
    counts = {name: _count(models.ModelSpec(name)) for name in SHIPPED}
    assert counts == {
        "gpt2": 124_439_808,
        "mixtral-8x7b": 46_702_792_704,
        "qwen2-7b": 7_615_616_512,
        "t0-3b": 2_849_757_184,
        "vit-base": 86_567_656,
    }


def test_ckptbench_sizes_prints_mixtral_within_half_a_percent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert sizes_cli.main(["--model", "mixtral-8x7b"]) == 0
    text = capsys.readouterr().out
    found = re.search(r"^parameters\s+([\d,]+) in (\d+) tensors$", text, re.M)
    assert found is not None, text
    assert abs(int(found[1].replace(",", "")) / 46.7e9 - 1) <= 0.005
    assert int(found[2]) == 3 + 32 * 9  # embed, norm, head; per layer 4 attention, 3 MoE, 2 norms
    assert "published        46,700,000,000 (Mistral AI" in text
    assert sizes_cli.main(["--model", "mixtral-8x7b", "--world-size", "8", "--json"]) == 0
    [sized] = json.loads(capsys.readouterr().out)
    assert sized["published_parameters"] == 46_700_000_000
    assert (sized["layers"], sized["vocab"]) == (32, 32000)
    # 12 B/param and a 4-byte step per parameter tensor; rank 0 holds an eighth of every tensor.
    assert sized["total_bytes"] == 12 * 46_702_792_704 + 4 * 291
    assert sized["memory_peak_bytes_estimate"] > sized["largest_rank_bytes"] > 65 * 1024**3


def test_the_memory_plan_counts_transformers_in_a_hugging_face_rank() -> None:
    def baseline(model: str) -> int:
        config = WorkloadConfig(model=model, checkpoint_path="/tmp/x", backend="file")
        return config.memory_estimate().baseline_bytes

    llama = memory_plan.BASELINE_BYTES[Backend.FILE] + memory_plan.MODEL_RUNTIME_BYTES
    assert baseline("llama3-debug") == llama
    assert baseline("vit-base") == llama + memory_plan.TRANSFORMERS_BYTES


def test_the_state_is_every_parameter_sharded_on_dim_0_with_adamw() -> None:
    spec = models.ModelSpec("mixtral-8x7b", layers=1)
    params = models.model_parameters(spec)
    tensors = {t.key: t for t in models.state_tensors(spec)}
    assert len(tensors) == 4 * len(params)
    for p in params:
        weight = tensors[p.fqn]
        assert (weight.shape, weight.dtype, weight.sharded) == (p.shape, "float32", True)
        for moment in ("exp_avg", "exp_avg_sq"):
            t = tensors[f"optimizer.state.{p.fqn}.{moment}"]
            assert (t.shape, t.dtype, t.sharded) == (p.shape, "float32", True)
        step = tensors[f"optimizer.state.{p.fqn}.step"]
        assert (step.shape, step.sharded) == ((), False)
    experts = tensors["model.layers.0.mlp.experts.gate_up_proj"]
    assert experts.shape == (8, 2 * 14336, 4096)


@pytest.mark.parametrize("world_size", [2, 3, 5, 16])
def test_a_rank_holds_its_torch_chunk_rows_of_every_tensor(world_size: int) -> None:
    # vit-base has (1, 1, 768) and (1, 197, 768) tensors: dim 0 below the world size.
    for name in ("mixtral-8x7b", "vit-base"):
        spec = models.ModelSpec(name, layers=1)
        tensors = models.state_tensors(spec)
        for rank in range(world_size):
            want = 0
            for t in tensors:
                if not t.sharded:
                    want += t.nbytes
                    continue
                pieces = torch.chunk(torch.empty(t.shape, device="meta"), world_size, dim=0)
                if rank < len(pieces):
                    want += pieces[rank].numel() * t.itemsize
            assert models.rank_bytes(tensors, world_size, rank) == want, (name, rank)


def _variants() -> list[tuple[str, dict[str, Any]]]:
    """Each family beside its shipped config, with the options its shapes depend on."""
    small = {
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": 100,
    }
    gpt2 = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 32}
    vit = {
        "model_type": "vit",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "image_size": 64,
        "patch_size": 16,
    }
    t5 = {"model_type": "t5", "d_model": 64, "d_kv": 16, "d_ff": 96, "num_heads": 4}
    return [
        ("llama", {**small, "model_type": "llama", "attention_bias": True, "mlp_bias": True}),
        ("llama-tied", {**small, "model_type": "llama", "tie_word_embeddings": True}),
        ("mistral-head-dim", {**small, "model_type": "mistral", "head_dim": 32}),
        ("qwen2-tied", {**small, "model_type": "qwen2", "tie_word_embeddings": True}),
        ("mixtral", {**small, "model_type": "mixtral", "num_local_experts": 4}),
        ("gpt2-n-inner", {**gpt2, "n_inner": 80, "vocab_size": 100}),
        ("vit-no-qkv-bias", {**vit, "qkv_bias": False, "num_labels": 7}),
        ("t5-relu-tied", {**t5, "num_layers": 2, "num_decoder_layers": 3, "vocab_size": 100}),
    ]


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("dtype", list(models.DtypeProfile))
def test_the_sizes_are_what_transformers_builds(name: str, dtype: models.DtypeProfile) -> None:
    """Every parameter's name, shape, dtype and order, on the meta device, as the rank checks."""
    hf_meta.check.cache_clear()
    hf_meta.check(models.ModelSpec(name, dtype=dtype))
    hf_meta.check(models.ModelSpec(name, layers=1, dtype=dtype))


@pytest.mark.parametrize("name", SHIPPED)
def test_layers_scales_every_stack(name: str) -> None:
    """One layer means one block in each stack: T5's decoder as well as its encoder."""
    names = [p.fqn for p in models.model_parameters(models.ModelSpec(name, layers=1))]
    blocks = {m[1] for n in names if (m := re.search(r"\.(?:layers|h|block)\.(\d+)\.", n))}
    assert blocks == {"0"}
    assert models.dimensions(models.ModelSpec(name, layers=1))[0] == 1


@pytest.mark.parametrize(("label", "config"), _variants(), ids=[v[0] for v in _variants()])
def test_each_family_option_is_what_transformers_builds(
    label: str, config: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    for layers, vocab in ((None, None), (1, None), (3, 77 if "vit" not in label else None)):
        hf_meta.check(models.ModelSpec(str(path), layers=layers, vocab=vocab))


def test_the_rank_refuses_sizes_that_leave_a_parameter_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, shapes, keys = hf_shapes.FAMILIES["gpt2"]
    monkeypatch.setitem(hf_shapes.FAMILIES, "gpt2", (name, lambda c: shapes(c)[:-1], keys))
    models._model_parameters.cache_clear()
    hf_meta.check.cache_clear()
    try:
        with pytest.raises(models.ModelError, match=r"^model: gpt2: transformers builds, "
                           r"uncounted: transformer\.ln_f\.bias \(768,\) float32"):  # fmt: skip
            hf_meta.check(models.ModelSpec("gpt2"))
    finally:
        models._model_parameters.cache_clear()
        hf_meta.check.cache_clear()


def test_the_rank_checks_its_state_before_building_it(monkeypatch: pytest.MonkeyPatch) -> None:
    name, shapes, keys = hf_shapes.FAMILIES["gpt2"]
    monkeypatch.setitem(hf_shapes.FAMILIES, "gpt2", (name, lambda c: shapes(c)[1:], keys))
    models._model_parameters.cache_clear()
    hf_meta.check.cache_clear()
    config = WorkloadConfig(model="gpt2", layers=1, checkpoint_path="/tmp/x", backend="file")
    try:
        # The check comes first: no mesh is needed to refuse (None would fail on first use).
        with pytest.raises(models.ModelError, match=r"uncounted: transformer\.wte\.weight"):
            model_state._state(config, cast(Any, None), fill=True, saved_world=1)
    finally:
        models._model_parameters.cache_clear()
        hf_meta.check.cache_clear()


@pytest.mark.timeout(180)
def test_a_config_the_sizes_cannot_follow_is_refused_before_the_rendezvous(
    tmp_path: Path,
) -> None:
    # GPT-2 with cross-attention: transformers adds a crossattention block to every layer, which
    # the pure rules do not count. Only rank 1 of 2 is started: a refusal after the rendezvous
    # would wait there instead (its deadline is longer than this test's).
    path = tmp_path / "gpt2-cross.json"
    base = json.loads((hf_shapes.CONFIG_DIR / "gpt2.json").read_text())
    path.write_text(json.dumps({**base, "add_cross_attention": True}))
    config = small_config(
        str(tmp_path / "ckpt"), model=str(path), layers=1, rendezvous_timeout_seconds=600
    )
    [w] = workers.run(config, tmp_path, ranks=[1], timeout=150)
    assert w.proc.returncode == 2, workers.logs([w])
    result = RankResult.from_termination_message(w.termination_path.read_text())
    assert result.error is not None
    assert result.error.startswith(
        f"ModelRefused: model: {path}: transformers builds, uncounted: "
        "transformer.h.0.crossattention."
    ), result.error
    assert "rendezvous" not in w.stderr.lower()


def test_the_rank_refuses_a_dtype_other_than_the_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(hf_meta._DTYPES, "float32", torch.bfloat16)
    hf_meta.check.cache_clear()
    try:
        with pytest.raises(models.ModelError, match=r"counted, not built: .* float32"):
            hf_meta.check(models.ModelSpec("vit-base", layers=1))
    finally:
        hf_meta.check.cache_clear()


def test_a_config_path_is_sized_as_its_shipped_twin(tmp_path: Path) -> None:
    path = tmp_path / "mixtral.json"
    path.write_text((hf_shapes.CONFIG_DIR / "mixtral-8x7b.json").read_text())
    by_name = models.model_sizes(models.ModelSpec("mixtral-8x7b", layers=2), 4)
    by_path = models.model_sizes(models.ModelSpec(str(path), layers=2), 4)
    assert by_path.total_bytes == by_name.total_bytes
    assert by_path.largest_rank_bytes == by_name.largest_rank_bytes


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "model: cannot read"),
        ("[1, 2]", "model: .* holds no JSON object"),
        ('{"model_type": "bert"}', "model: model_type 'bert' is not built; known: gpt2, llama"),
        (
            '{"model_type": "llama", "architectures": ["LlamaForSequenceClassification"]}',
            "model: architecture 'LlamaForSequenceClassification' is not built",
        ),
        ('{"model_type": "llama", "hidden_size": 64}', "model: the config has no 'num_hidden_l"),
    ],
)
def test_a_bad_config_is_refused_naming_model(
    content: str | None, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message):
        WorkloadConfig(model=str(path), checkpoint_path=str(tmp_path), backend="file")


def test_a_vision_model_refuses_a_vocabulary() -> None:
    with pytest.raises(ValueError, match="vocab: a vision model has no vocabulary"):
        WorkloadConfig(model="vit-base", vocab=10, checkpoint_path="/tmp/x", backend="file")


def _small_mixtral(tmp_path: Path) -> Path:
    """The shipped Mixtral with every width divided by 32: 8 experts, top 2, 4:1 grouped heads."""
    config = json.loads((hf_shapes.CONFIG_DIR / "mixtral-8x7b.json").read_text())
    config |= {"hidden_size": 128, "intermediate_size": 448, "vocab_size": 1000}
    path = tmp_path / "mixtral-small.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["file", "gcs"])
def test_a_scaled_down_mixtral_saves_loads_and_verifies(backend: str, tmp_path: Path) -> None:
    config = _small_mixtral(tmp_path)
    out = tmp_path / "summary.json"
    storage = ["--storage", str(tmp_path / "ckpt"), "--keep"] if backend == "file" else []
    argv = ["--model", str(config), "--layers", "2", "--world-size", "2", "--samples", "1",
            "--warmup", "0", "--backend", backend, "--json", str(out), *storage]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "run", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=280, env={"OMP_NUM_THREADS": "1",
        "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [run] = json.loads(out.read_text())["runs"]
    assert run["verified"] is True
    assert run["extra"]["settings"]["model"] == str(config)
    spec = models.ModelSpec(str(config), layers=2)
    assert run["total_bytes"] == models.model_sizes(spec, 2).total_bytes
    params = _count(spec)
    assert run["total_bytes"] == 12 * params + 4 * len(models.model_parameters(spec))
    if backend == "file":
        _check_dcp_metadata(tmp_path / "ckpt")


def _check_dcp_metadata(root: Path) -> None:
    """DCP holds every parameter and moment in two Shard(0) chunks, the step once."""
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    [checkpoint] = root.glob("*/checkpoints/ckpt_0.ckpt")
    metadata = FileSystemReader(str(checkpoint)).read_metadata().state_dict_metadata
    for key in ("model.layers.1.mlp.experts.gate_up_proj",
                "optimizer.state.model.layers.1.mlp.experts.gate_up_proj.exp_avg_sq"):  # fmt: skip
        item = metadata[key]
        assert isinstance(item, TensorStorageMetadata)
        assert tuple(item.size) == (8, 2 * 448, 128)
        assert [tuple(c.offsets) for c in item.chunks] == [(0, 0, 0), (4, 0, 0)]
    step = metadata["optimizer.state.lm_head.weight.step"]
    assert isinstance(step, TensorStorageMetadata) and len(step.chunks) == 1
    assert math.prod(metadata["lm_head.weight"].size) == 1000 * 128  # type: ignore[union-attr]
