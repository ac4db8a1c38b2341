"""A Hugging Face model built from its config on the meta device: its parameters as transformers
makes them, checked against the pure sizes before a rank allocates anything.

The rank's state is the list ``contract/checkpoint/models.py`` computes (the one the operator and
``ckptbench sizes`` sized the run with); this builds the real model, with no memory and no
weights, and refuses the run when any parameter's name, shape or dtype differs, naming them, so
the sizes a run was planned with are the checkpoint's.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ckptbench.workload.contract.checkpoint import hf_shapes, models

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
Described = list[tuple[str, tuple[int, ...], str]]


def meta_model(config: dict[str, Any], dtype: str) -> torch.nn.Module:
    """The config's model on the meta device in ``dtype``, as ``from_pretrained`` leaves it."""
    name, _, _ = hf_shapes.family(config)
    import transformers  # seconds to import, and only a Hugging Face model's rank needs it

    built = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        model: torch.nn.Module = getattr(transformers, name)(built)
    head = getattr(model, "lm_head", None)
    # T5's config forces tying; from_pretrained unties when the checkpoint holds its own head, as
    # every T5 v1.1 checkpoint does (its config's tie_word_embeddings false). A tied head is
    # shared, so named_parameters() lists it under the embedding's name only.
    tied = "lm_head.weight" not in dict(model.named_parameters())
    if (
        config.get("tie_word_embeddings", True) is False
        and isinstance(head, torch.nn.Linear)
        and tied
    ):
        head.weight = torch.nn.Parameter(torch.empty_like(head.weight))
    return model.to(_DTYPES[dtype])


def described(model: torch.nn.Module) -> Described:
    params = model.named_parameters()
    return [(n, tuple(p.shape), str(p.dtype).removeprefix("torch.")) for n, p in params]


@functools.lru_cache(maxsize=8)
def check(spec: models.ModelSpec) -> None:
    """Refuse (``ModelError`` naming the parameters) a Hugging Face model whose transformers build
    differs from the sizes computed for it; a Llama 3 preset has nothing to check."""
    if spec.preset in models.PRESETS:
        return
    config = hf_shapes.effective_config(spec.preset, spec.layers, spec.vocab)
    weight = models.WEIGHT_DTYPES[spec.dtype.value]
    want = [(p.fqn, p.shape, weight) for p in models.model_parameters(spec)]
    got = described(meta_model(config, weight))
    if got != want:
        raise models.ModelError(f"model: {spec.preset}: {differences(want, got)}")


def differences(want: Described, got: Described) -> str:
    """What transformers built that the sizes did not count, and the other way round."""
    extra = [f"{n} {s} {d}" for n, s, d in got if (n, s, d) not in want]
    missing = [f"{n} {s} {d}" for n, s, d in want if (n, s, d) not in got]
    parts = []
    if extra:
        parts.append(f"transformers builds, uncounted: {', '.join(extra[:5])}")
    if missing:
        parts.append(f"counted, not built: {', '.join(missing[:5])}")
    if not parts:
        parts.append("the same parameters in another order")
    return "; ".join(parts) + f" ({len(got)} built, {len(want)} counted)"
