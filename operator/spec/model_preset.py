"""``spec.model``: a Llama 3 preset sharded as FSDP2 does, instead of the reference layout.

Sizes come from the workload's contract (``contract/models.py``), the same arithmetic the ranks
use, so the operator can judge a spec's memory before any pod exists.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from ckptbench.workload.contract import models
from ckptbench.workload.contract.config import LayersOverride, VocabOverride


def enum_field(default: Any, description: str) -> Any:
    """A field holding one of an enum's values, or its value as the plain string a manifest holds
    (strict enums would refuse it)."""
    return Field(default, strict=False, description=description)


class ModelSettings(BaseModel):
    """A model preset with its overrides, optimizer state and dtype profile."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, frozen=True
    )

    preset: models.Preset = enum_field(
        ...,
        "Llama 3 preset (torchtitan's shapes and key names): llama3-debug, "
        "llama3-8b, llama3-70b, mlperf-llama3-70b (MLPerf Storage's config, 128 heads) or "
        "llama3-405b.",
    )
    layers: LayersOverride | None = Field(
        None, description="Override the number of layers (scaled-down runs)."
    )
    vocab: VocabOverride | None = Field(
        None, description="Override the vocabulary size (scaled-down runs)."
    )
    optimizer: models.Optimizer = enum_field(
        models.Optimizer.ADAMW,
        "Optimizer state saved beside the weights: adamw (exp_avg, exp_avg_sq, step "
        "and param_groups, torchtitan's flattened names) or none.",
    )
    dtype: models.DtypeProfile = enum_field(
        models.DtypeProfile.FP32,
        "Dtype profile: fp32 (12 bytes/parameter with AdamW, torchtitan's), mlperf "
        "(fp16 weights + fp32 master and moments, 14 bytes/parameter: MLPerf Storage's totals) "
        "or bf16.",
    )

    def to_contract(self) -> models.ModelSpec:
        return models.ModelSpec(self.preset, self.layers, self.vocab, self.optimizer, self.dtype)


def workload_layout(
    model: ModelSettings | None, layer_size: int, padding_size: int
) -> dict[str, Any]:
    """The workload config's layout fields: a model's, or the reference layout's sizes."""
    if model is None:
        return {"layer_size": layer_size, "padding_size": padding_size}
    return {
        "model": model.preset,
        "layers": model.layers,
        "vocab": model.vocab,
        "optimizer": model.optimizer,
        "dtype": model.dtype,
    }
