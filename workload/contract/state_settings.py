"""How a benchmark's state lies across its ranks, declared once: the world size, the reference's
layout or a model preset, the strategy, resharding and the shard each rank loads.

:class:`StateSettings` extends
:class:`~ckptbench.workload.contract.storage_settings.StorageSettings` and
:class:`~ckptbench.workload.contract.settings.BenchmarkSettings` extends it; each field carries its
:class:`~ckptbench.workload.contract.declaration.Setting` metadata, and the rules that span these
fields follow the class (:data:`STATE_RULES`), read by the rank's config and the CRD alike.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, ValidationInfo, field_validator

from ckptbench.workload.contract.checkpoint import models, sizes
from ckptbench.workload.contract.choices import Backend, Compression, Format, Strategy
from ckptbench.workload.contract.declaration import Setting, choice, no_crd_default
from ckptbench.workload.contract.rule import Rule
from ckptbench.workload.contract.storage_settings import StorageSettings

MAX_WORLD_SIZE = 10_000  # rank hostnames stay DNS labels (see operator/spec/names.py)
REFERENCE_LAYER_SIZE = 100_000  # the reference's published table
REFERENCE_PADDING_SIZE = 196
# A model by name (a Llama 3 preset, a shipped Hugging Face config) or a config.json's path.
# Where format safetensors can go: a local or fsspec file system (storage/hf/object_store.py).
SAFETENSORS_BACKENDS = (Backend.FILE, Backend.GCSFS, Backend.S3FS)
MODEL_PATTERN = "^(" + "|".join(models.model_names()) + r"|.+\.json)$"


class StateSettings(StorageSettings):
    """The state each rank holds, saves and loads: the same for every rank."""

    # The group its settings are listed in by `ckptbench run --help` (and `sizes`).
    OPTIONS_GROUP: ClassVar[str] = "state"

    world_size: Annotated[int, Setting(local_default=2, axis=True)] = Field(
        4,
        ge=1,
        le=MAX_WORLD_SIZE,
        description="Number of ranks: one pod (or local process) each (the reference's "
        "WORLD_SIZE).",
    )
    layer_size: Annotated[
        int,
        Setting(layout="reference", unit="rows", local_default=10_000, axis=True, metavar="ROWS"),
    ] = Field(
        REFERENCE_LAYER_SIZE,
        ge=1,
        le=10_000_000,
        description="Rows of each (layerSize, 1000) float32 tensor: a tensor is layerSize * 4000 "
        "bytes (the reference's LAYER_SIZE). Default 100000; not with model.",
        json_schema_extra=no_crd_default,
    )
    padding_size: Annotated[
        int, Setting(layout="reference", unit="tensors", local_default=8, axis=True)
    ] = Field(
        REFERENCE_PADDING_SIZE,
        ge=1,
        le=1_000_000,
        description="Number of tensors, dealt round-robin to the ranks; at least worldSize. Shards "
        "are even when it is a multiple of worldSize (the reference's PADDING_SIZE). Default 196; "
        "not with model.",
        json_schema_extra=no_crd_default,
    )
    model: Annotated[str | None, Setting(axis=True, metavar="MODEL")] = Field(
        None,
        min_length=1,
        max_length=4096,
        # A schema constraint, as the presets' enum was: the API server refuses a bad name in a
        # benchmark and in a sweep's axis alike (whose values keep the field's constraints).
        pattern=MODEL_PATTERN,
        description="A model instead of the reference layout: a Llama 3 preset (torchtitan's "
        "shapes and key names: llama3-debug, llama3-8b, llama3-70b, mlperf-llama3-70b (MLPerf "
        "Storage's config, 128 heads), llama3-405b, mlperf-llama3-1t), a shipped Hugging Face "
        "config (mixtral-8x7b, vit-base, t0-3b, qwen2-7b, gpt2; transformers' names) or, in a "
        "local run, a path to a config.json. Every rank holds its Shard(0) rows of every "
        "parameter (and AdamW state) as a DTensor, as FSDP2 does. Exclusive with layerSize and "
        "paddingSize.",
    )
    layers: Annotated[int | None, Setting(layout="model", axis=True)] = Field(
        None,
        ge=1,
        le=1000,
        description="With model: override the number of layers (scaled-down runs); of every "
        "stack of a Hugging Face model (a T5's encoder and decoder alike).",
    )
    vocab: Annotated[int | None, Setting(layout="model", axis=True)] = Field(
        None,
        ge=1,
        le=10_000_000,
        description="With model: override the vocabulary size (scaled-down runs; a vision "
        "model has none).",
    )
    optimizer: Annotated[models.Optimizer, Setting(layout="model", axis=True, metavar="NAME")] = (
        choice(
            models.Optimizer.ADAMW,
            "With model: optimizer state saved beside the weights: adamw (exp_avg, exp_avg_sq, "
            "step and param_groups, torchtitan's flattened names) or none.",
        )
    )
    dtype: Annotated[models.DtypeProfile, Setting(layout="model", axis=True, metavar="PROFILE")] = (
        choice(
            models.DtypeProfile.FP32,
            "With model: dtype profile: fp32 (12 bytes/parameter with AdamW, torchtitan's), mlperf "
            "(fp16 weights + fp32 master and moments, 14 bytes/parameter: MLPerf Storage's totals) "
            "or bf16.",
        )
    )
    load_world_size: Annotated[int | None, Setting(layout="model", axis=True, metavar="M")] = Field(
        None,
        ge=1,
        le=MAX_WORLD_SIZE,
        description="With model: load on loadWorldSize ranks, resharding the checkpoint the "
        "worldSize ranks saved into that many pieces and verifying them: fewer (the first "
        "loadWorldSize ranks load, a restart on fewer nodes) or more (the run starts "
        "loadWorldSize ranks, the first worldSize save, all load: a restart on more nodes). "
        "Default: every rank.",
    )
    strategy: Annotated[Strategy, Setting(axis=True, metavar="NAME")] = choice(
        Strategy.SHARDED,
        "How the state lies across ranks and is checkpointed: sharded (each rank saves its own "
        "shards through DCP, FSDP's way; the default), full (the whole state gathered to rank 0, "
        "the gather timed as planning, then saved as one object through the backend's stream as "
        "torch.save into a writer does, and loaded back by rank 0) or replicated (every rank "
        "holds the whole state, DDP's way; DCP writes each tensor once, from the rank its "
        "planner picks, and every rank loads all of it). full and replicated need the "
        "reference layout.",
    )
    format: Annotated[Format, Setting(axis=True, metavar="FORMAT")] = Field(
        Format.DCP,
        strict=False,
        validate_default=True,
        description="What a checkpoint is written as: dcp (DCP's own, the default), safetensors "
        "(DCP's Hugging Face writer: each rank's safetensors file; on file the coordinator "
        "consolidates them into one file, timed apart as the save's finish, read by DCP's "
        "reader; on gcsfs and s3fs they stay as written, and ckptbench's reader fetches each "
        "header and each tensor's bytes by ranged reads; backends file, gcsfs, s3fs) "
        "or torch-save (the whole state gathered to rank 0 and saved as one "
        "torch.save object, as PyTorch Lightning's single-file checkpoint; the same save as "
        "strategy full, which always writes it). torch-save needs the reference layout. "
        "Default dcp (torch-save with strategy full).",
        json_schema_extra=no_crd_default,
    )
    compression: Annotated[Compression, Setting(axis=True, metavar="NAME")] = choice(
        Compression.NONE,
        "none, or zstd: every file DCP writes goes through its ZStandard stream extension "
        "(zstandard's default level), and is decompressed on load. Format dcp only.",
    )
    load_shard_offset: Annotated[
        int | None, Setting(layout="reference", axis=True, metavar="K")
    ] = Field(
        None,
        ge=1,
        le=MAX_WORLD_SIZE,
        description="Reference layout: each rank loads (and verifies) the shard rank "
        "(rank + K) mod worldSize saved, not its own: MLPerf Storage's read phase, another host "
        "taking over. K = ranks per node makes every rank read another node's shard. Default: "
        "its own shard.",
    )
    seed: Annotated[int, Setting(axis=True)] = Field(
        0, ge=0, le=2**31 - 1, description="Seed of the synthetic tensor content."
    )
    memory_check: Annotated[
        bool,
        Setting(
            flag="--force",
            switch="Run even when the estimated peak per rank exceeds the memory it may use (by "
            "default such a run is refused before anything is allocated; docs/models.md)",
        ),
    ] = Field(
        True,
        description="Refuse, before anything is allocated, a run whose estimated peak per rank "
        "(docs/models.md) exceeds the memory it may use (the container's limit; on a laptop, the "
        "available memory shared by the ranks); false runs anyway.",
    )

    # -- what follows from them ------------------------------------------------------------------

    @property
    def model_spec(self) -> models.ModelSpec | None:
        """The model preset with its overrides, or None for the reference layout."""
        if self.model is None:
            return None
        return models.ModelSpec(self.model, self.layers, self.vocab, self.optimizer, self.dtype)

    @property
    def rank_count(self) -> int:
        """Processes (pods) the run starts: worldSize, or loadWorldSize when the restore is onto
        more ranks than saved (the first worldSize of them save, all of them load)."""
        return max(self.world_size, self.load_world_size or 0)

    @field_validator("format")
    @classmethod
    def _full_is_torch_save(cls, value: Format, info: ValidationInfo) -> Format:
        # strategy full saves one torch.save object whatever format says (it was that before
        # format was declared): a dcp there would make the result name a format never written.
        if info.data.get("strategy") is Strategy.FULL and value is Format.DCP:
            return Format.TORCH_SAVE
        return value

    @property
    def single_object(self) -> bool:
        """True when the whole state is saved as one torch.save object from rank 0."""
        return self.format is Format.TORCH_SAVE

    def model_sizes(self) -> models.ModelSizes | None:
        """The model's sizes at this world size, or None for the reference layout."""
        spec = self.model_spec
        return None if spec is None else models.model_sizes(spec, self.world_size)

    @property
    def total_bytes(self) -> int:
        """The checkpoint's tensor bytes, all ranks: what the run's throughput divides."""
        sized = self.model_sizes()
        if sized is not None:
            return sized.total_bytes
        return sizes.total_bytes(self.layer_size, self.padding_size)


# layerSize and paddingSize have no CRD default (so `has` tells whether a spec set them): CEL
# reads them through these, with the reference's values when absent.
LAYER_SIZE_CEL = f"(has(self.layerSize) ? self.layerSize : {REFERENCE_LAYER_SIZE})"
PADDING_SIZE_CEL = f"(has(self.paddingSize) ? self.paddingSize : {REFERENCE_PADDING_SIZE})"


def _model_alone(s: StateSettings) -> bool:
    return s.model is None or not ({"layer_size", "padding_size"} & s.model_fields_set)


# The rules that span the state's settings (rule.py says how a rule is read); settings.RULES
# holds them with the others.
STATE_RULES: tuple[Rule[StateSettings], ...] = (
    Rule(
        "model",
        "!has(self.model) || (!has(self.layerSize) && !has(self.paddingSize))",
        "is exclusive with {layer_size} and {padding_size} (the reference layout's settings)",
        _model_alone,
    ),
    Rule(
        "layers",
        "!has(self.layers) || has(self.model)",
        "needs {model}: it overrides a model preset's number of layers",
        lambda s: s.layers is None or s.model is not None,
    ),
    Rule(
        "vocab",
        "!has(self.vocab) || has(self.model)",
        "needs {model}: it overrides a model preset's vocabulary size",
        lambda s: s.vocab is None or s.model is not None,
    ),
    Rule(
        "load_world_size",
        "!has(self.loadWorldSize) || has(self.model)",
        "needs {model}: {load_world_size} ranks reshard the checkpoint {world_size} ranks saved "
        "(fewer: the first ones load; more: the run has {load_world_size} ranks, the first "
        "{world_size} save)",
        lambda s: s.load_world_size is None or s.model is not None,
    ),
    Rule(
        "strategy",
        "!has(self.strategy) || self.strategy == 'sharded' || "
        "(!has(self.model) && !has(self.loadShardOffset))",
        "full and replicated need the reference layout (no {model}) and no "
        "{load_shard_offset}: a model preset is FSDP2's sharded state, and no rank of theirs has "
        "a shard of its own to trade",
        lambda s: (
            s.strategy is Strategy.SHARDED or (s.model is None and s.load_shard_offset is None)
        ),
    ),
    Rule(
        "format",
        "!has(self.format) || self.format != 'safetensors' || "
        "((!has(self.strategy) || self.strategy != 'full') && "
        f"self.backend in [{', '.join(repr(b.value) for b in SAFETENSORS_BACKENDS)}])",
        "safetensors needs {backend} file, gcsfs or s3fs and a {strategy} other than full: "
        "DCP's Hugging Face writer, and ckptbench's ranged reader in place of DCP's local one, "
        "move safetensors only through a local or fsspec file system, and full writes torch-save",
        lambda s: (
            s.format is not Format.SAFETENSORS
            or (s.backend in SAFETENSORS_BACKENDS and s.strategy is not Strategy.FULL)
        ),
    ),
    Rule(
        "strategy",
        "!has(self.strategy) || self.strategy != 'replicated' || self.backend != 'dataflux'",
        "replicated cannot run {backend} dataflux: DCP writes each tensor once, so a rank may "
        "be left a file with nothing in it, and the connector uploads every file as an XML "
        "multipart upload, which cannot be completed without a part",
        lambda s: s.strategy is not Strategy.REPLICATED or s.backend is not Backend.DATAFLUX,
    ),
    Rule(
        "format",
        "!has(self.format) || self.format != 'torch-save' || "
        "(has(self.strategy) && self.strategy == 'full') || "
        "((!has(self.strategy) || self.strategy != 'replicated') && !has(self.model) && "
        "!has(self.loadShardOffset))",
        "torch-save needs the reference layout (no {model}), no {load_shard_offset} and a "
        "{strategy} other than replicated: the state is gathered to rank 0, which saves and "
        "loads it alone",
        # strategy full's own rule above speaks for it (full always writes torch-save).
        lambda s: (
            s.format is not Format.TORCH_SAVE
            or s.strategy is Strategy.FULL
            or (
                s.strategy is not Strategy.REPLICATED
                and s.model is None
                and s.load_shard_offset is None
            )
        ),
    ),
    Rule(
        "compression",
        "!has(self.compression) || self.compression == 'none' || "
        "((!has(self.format) || self.format == 'dcp') && "
        "(!has(self.strategy) || self.strategy != 'full'))",
        "zstd needs {format} dcp (and a {strategy} other than full, which writes torch-save): it "
        "is an extension of DCP's own file writer",
        lambda s: s.compression is Compression.NONE or s.format is Format.DCP,
    ),
    Rule(
        "load_shard_offset",
        "!has(self.loadShardOffset) || "
        "(!has(self.model) && self.loadShardOffset % self.worldSize != 0)",
        "needs the reference layout (no {model}) and must not be a multiple of {world_size}: "
        "each rank loads the shard of rank (rank + {load_shard_offset}) mod {world_size}",
        lambda s: (
            s.load_shard_offset is None
            or (s.model is None and s.load_shard_offset % s.world_size != 0)
        ),
    ),
    Rule(
        "padding_size",
        f"has(self.model) || {PADDING_SIZE_CEL} >= self.worldSize",
        "must be at least {world_size}: every rank owns at least one tensor",
        lambda s: s.model is not None or s.padding_size >= s.world_size,
    ),
)
