"""Hugging Face models' parameters from their ``config.json``: names and shapes, without torch.

The operator sizes a run (memory limits, the memory check) in an image with neither torch nor
transformers, so the shapes are computed here, per family, as transformers 5.24 (the version the
``models`` extra pins) builds them: its ``named_parameters()`` (tied weights once), in its order.
The rank builds the same model on the meta device with transformers (``rank/hf_meta.py``) and
refuses to run when the two differ, and ``tests/test_hf_models.py`` compares them for every
shipped config and scaled-down variants, so a family computed wrong cannot size a run unnoticed.
A config of another family is refused by name. The shipped configs are in ``hf_configs/``, their
sources and published parameter counts in :data:`SHIPPED`; docs/models.md says more.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Shape = tuple[int, ...]
Params = list[tuple[str, Shape]]
Config = Mapping[str, Any]

CONFIG_DIR = Path(__file__).with_name("hf_configs")


class ModelError(ValueError):
    """A model setting is wrong; the message starts with the field's name."""


@dataclass(frozen=True)
class Shipped:
    """A shipped config: where it was published, and the parameter count published for it."""

    repo: str  # the Hugging Face repository whose config.json this is
    published_params: int
    source: str  # who published the count


SHIPPED: dict[str, Shipped] = {
    "mixtral-8x7b": Shipped(
        "mistralai/Mixtral-8x7B-v0.1",
        46_700_000_000,
        "Mistral AI's Mixtral of experts announcement: 46.7B total parameters",
    ),
    "vit-base": Shipped(
        "google/vit-base-patch16-224",
        86_567_656,
        "torchvision's vit_b_16 (the same network, 1000 classes): num_params 86,567,656",
    ),
    "t0-3b": Shipped(
        "bigscience/T0_3B", 2_850_000_000, "Hugging Face's page for bigscience/T0_3B: 2.85B params"
    ),
    "qwen2-7b": Shipped(
        "Qwen/Qwen2-7B", 7_620_000_000, "Hugging Face's page for Qwen/Qwen2-7B: 7.62B params"
    ),
    "gpt2": Shipped("openai-community/gpt2", 124_000_000, "Hugging Face's gpt2 model card: 124M"),
}


def is_config_path(model: str) -> bool:
    return model.endswith(".json")


def load_config(model: str) -> dict[str, Any]:
    """The config of a shipped name or of a path to a config.json."""
    path = CONFIG_DIR / f"{model}.json" if model in SHIPPED else Path(model)
    if not is_config_path(model) and model not in SHIPPED:
        raise ModelError(f"model: {model!r} is no shipped config and no path to a .json file")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"model: cannot read {model} as a config.json: {exc}") from None
    if not isinstance(config, dict):
        raise ModelError(f"model: {model} holds no JSON object")
    return config


def _get(config: Config, key: str, default: Any = None) -> Any:
    value = config.get(key, default)
    if value is None:
        raise ModelError(f"model: the config has no {key!r}")
    return value


def _decoder(c: Config) -> Params:
    """Llama, Mistral, Qwen2 and Mixtral: RMSNorm decoders with rotary attention (no buffers)."""
    kind = c["model_type"]
    d, n_layers = _get(c, "hidden_size"), _get(c, "num_hidden_layers")
    heads, vocab = _get(c, "num_attention_heads"), _get(c, "vocab_size")
    kv = c.get("num_key_value_heads") or heads
    hd = c.get("head_dim") or d // heads
    qkv_bias = kind == "qwen2" or bool(c.get("attention_bias", False))
    out: Params = [("model.embed_tokens.weight", (vocab, d))]
    for i in range(n_layers):
        p = f"model.layers.{i}."
        for name, rows in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
            out.append((f"{p}self_attn.{name}_proj.weight", (rows, d)))
            if qkv_bias:
                out.append((f"{p}self_attn.{name}_proj.bias", (rows,)))
        out.append((f"{p}self_attn.o_proj.weight", (d, heads * hd)))
        if kind == "llama" and c.get("attention_bias", False):
            out.append((f"{p}self_attn.o_proj.bias", (d,)))
        out += _decoder_mlp(c, p, d)
        out += [(f"{p}input_layernorm.weight", (d,)), (f"{p}post_attention_layernorm.weight", (d,))]
    out.append(("model.norm.weight", (d,)))
    if not c.get("tie_word_embeddings", False):
        out.append(("lm_head.weight", (vocab, d)))
    return out


def _decoder_mlp(c: Config, p: str, d: int) -> Params:
    ffn = _get(c, "intermediate_size")
    if c["model_type"] == "mixtral":
        # transformers 5 keeps a layer's experts fused: one 3-D tensor per projection.
        experts = _get(c, "num_local_experts")
        return [
            (f"{p}mlp.gate.weight", (experts, d)),
            (f"{p}mlp.experts.gate_up_proj", (experts, 2 * ffn, d)),
            (f"{p}mlp.experts.down_proj", (experts, d, ffn)),
        ]
    bias = c["model_type"] == "llama" and bool(c.get("mlp_bias", False))
    out: Params = []
    for name, shape in (("gate", (ffn, d)), ("up", (ffn, d)), ("down", (d, ffn))):
        out.append((f"{p}mlp.{name}_proj.weight", shape))
        if bias:
            out.append((f"{p}mlp.{name}_proj.bias", (shape[0],)))
    return out


def _gpt2(c: Config) -> Params:
    """GPT2LMHeadModel: Conv1D weights stored (in, out); the head tied to ``wte``."""
    d, vocab = _get(c, "n_embd"), _get(c, "vocab_size")
    inner = c.get("n_inner") or 4 * d
    out: Params = [
        ("transformer.wte.weight", (vocab, d)),
        ("transformer.wpe.weight", (_get(c, "n_positions"), d)),
    ]
    for i in range(_get(c, "n_layer")):
        p = f"transformer.h.{i}."
        out += [(f"{p}ln_1.weight", (d,)), (f"{p}ln_1.bias", (d,))]
        out += [(f"{p}attn.c_attn.weight", (d, 3 * d)), (f"{p}attn.c_attn.bias", (3 * d,))]
        out += [(f"{p}attn.c_proj.weight", (d, d)), (f"{p}attn.c_proj.bias", (d,))]
        out += [(f"{p}ln_2.weight", (d,)), (f"{p}ln_2.bias", (d,))]
        out += [(f"{p}mlp.c_fc.weight", (d, inner)), (f"{p}mlp.c_fc.bias", (inner,))]
        out += [(f"{p}mlp.c_proj.weight", (inner, d)), (f"{p}mlp.c_proj.bias", (d,))]
    out += [("transformer.ln_f.weight", (d,)), ("transformer.ln_f.bias", (d,))]
    if not c.get("tie_word_embeddings", True):
        out.append(("lm_head.weight", (vocab, d)))
    return out


def _vit(c: Config) -> Params:
    """ViTForImageClassification (no pooler): patch embedding, class token, a linear head."""
    d, ffn = _get(c, "hidden_size"), _get(c, "intermediate_size")
    patch, channels = _get(c, "patch_size"), c.get("num_channels", 3)
    patches = (_get(c, "image_size") // patch) ** 2
    labels = len(c["id2label"]) if "id2label" in c else c.get("num_labels", 2)
    qkv_bias = bool(c.get("qkv_bias", True))
    out: Params = [
        ("vit.embeddings.cls_token", (1, 1, d)),
        ("vit.embeddings.position_embeddings", (1, patches + 1, d)),
        ("vit.embeddings.patch_embeddings.projection.weight", (d, channels, patch, patch)),
        ("vit.embeddings.patch_embeddings.projection.bias", (d,)),
    ]
    for i in range(_get(c, "num_hidden_layers")):
        p = f"vit.layers.{i}."
        for name in ("q", "k", "v"):
            out.append((f"{p}attention.{name}_proj.weight", (d, d)))
            if qkv_bias:
                out.append((f"{p}attention.{name}_proj.bias", (d,)))
        out += [(f"{p}attention.o_proj.weight", (d, d)), (f"{p}attention.o_proj.bias", (d,))]
        for norm in ("layernorm_before", "layernorm_after"):
            out += [(f"{p}{norm}.weight", (d,)), (f"{p}{norm}.bias", (d,))]
        out += [(f"{p}mlp.fc1.weight", (ffn, d)), (f"{p}mlp.fc1.bias", (ffn,))]
        out += [(f"{p}mlp.fc2.weight", (d, ffn)), (f"{p}mlp.fc2.bias", (d,))]
    out += [("vit.layernorm.weight", (d,)), ("vit.layernorm.bias", (d,))]
    out += [("classifier.weight", (labels, d)), ("classifier.bias", (labels,))]
    return out


def _t5(c: Config) -> Params:
    """T5ForConditionalGeneration: ``shared`` embeds both stacks; each stack's first block holds
    the relative position bias. ``lm_head`` is its own tensor when the config unties it (T5 v1.1,
    T0): transformers 5 builds it tied from a config alone and unties it at ``from_pretrained``,
    so the trained model has it, and so does the rank (``rank/hf_meta.py``)."""
    d, ffn, vocab = _get(c, "d_model"), _get(c, "d_ff"), _get(c, "vocab_size")
    inner = _get(c, "num_heads") * _get(c, "d_kv")
    buckets = c.get("relative_attention_num_buckets", 32)
    gated = str(c.get("feed_forward_proj", "relu")).startswith("gated-")
    wi = ["wi_0", "wi_1"] if gated else ["wi"]
    layers = _get(c, "num_layers")
    stacks = (("encoder", layers), ("decoder", c.get("num_decoder_layers") or layers))
    out: Params = [("shared.weight", (vocab, d))]
    for stack, n in stacks:
        attention = ["SelfAttention"] + (["EncDecAttention"] if stack == "decoder" else [])
        for i in range(n):
            p = f"{stack}.block.{i}.layer."
            for j, name in enumerate(attention):
                out += [(f"{p}{j}.{name}.{w}.weight", (inner, d)) for w in "qkv"]
                out.append((f"{p}{j}.{name}.o.weight", (d, inner)))
                if i == 0 and j == 0:
                    bias = (buckets, c["num_heads"])
                    out.append((f"{p}0.SelfAttention.relative_attention_bias.weight", bias))
                out.append((f"{p}{j}.layer_norm.weight", (d,)))
            f = len(attention)
            out += [(f"{p}{f}.DenseReluDense.{w}.weight", (ffn, d)) for w in wi]
            out.append((f"{p}{f}.DenseReluDense.wo.weight", (d, ffn)))
            out.append((f"{p}{f}.layer_norm.weight", (d,)))
        out.append((f"{stack}.final_layer_norm.weight", (d,)))
    if c.get("tie_word_embeddings", True) is False:
        out.append(("lm_head.weight", (vocab, d)))
    return out


# model_type -> (the transformers class built, its shapes, the keys holding its layer counts).
Family = tuple[str, Callable[[Config], Params], tuple[str, ...]]
FAMILIES: dict[str, Family] = {
    "llama": ("LlamaForCausalLM", _decoder, ("num_hidden_layers",)),
    "mistral": ("MistralForCausalLM", _decoder, ("num_hidden_layers",)),
    "qwen2": ("Qwen2ForCausalLM", _decoder, ("num_hidden_layers",)),
    "mixtral": ("MixtralForCausalLM", _decoder, ("num_hidden_layers",)),
    "gpt2": ("GPT2LMHeadModel", _gpt2, ("n_layer",)),
    "vit": ("ViTForImageClassification", _vit, ("num_hidden_layers",)),
    "t5": ("T5ForConditionalGeneration", _t5, ("num_layers", "num_decoder_layers")),
}


def family(config: Config) -> Family:
    """The config's family, refused by name when no rule computes its shapes."""
    kind = config.get("model_type")
    if kind not in FAMILIES:
        raise ModelError(
            f"model: model_type {kind!r} is not built; known: {', '.join(sorted(FAMILIES))}"
        )
    fam = FAMILIES[kind]
    archs = config.get("architectures") or [fam[0]]
    if archs[0] != fam[0]:
        raise ModelError(f"model: architecture {archs[0]!r} is not built; for {kind}: {fam[0]}")
    return fam


def effective_config(model: str, layers: int | None, vocab: int | None) -> dict[str, Any]:
    """The config with the run's overrides applied: what both the sizes and the rank build."""
    config = load_config(model)
    _, _, layer_keys = family(config)
    if layers is not None:
        for key in layer_keys:
            config[key] = layers
    if vocab is not None:
        if config["model_type"] == "vit":
            raise ModelError("vocab: a vision model has no vocabulary")
        config["vocab_size"] = vocab
    return config


def hf_parameters(config: Config) -> Params:
    """Every parameter of the config's model: transformers' names, shapes and order."""
    return family(config)[1](config)
