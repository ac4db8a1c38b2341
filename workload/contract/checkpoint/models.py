"""Model presets as FSDP2 leaves them in a DCP checkpoint: names, shapes, dtypes and sizes.

A model is a Llama 3 preset (torchtitan's shapes and key names, ``models/llama3``) or a Hugging
Face config (a shipped name or a path to a config.json; transformers' names, ``hf_shapes``).
Pure arithmetic, no torch: the operator and ``ckptbench sizes`` size a run before anything is
allocated, and the rank program builds exactly the tensors listed here. Sharding is FSDP2's
``Shard(0)`` with ``torch.chunk``'s rule. Facts and sources: ``docs/models.md``.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import NamedTuple

from ckptbench.workload.contract.checkpoint import hf_shapes
from ckptbench.workload.contract.checkpoint.hf_shapes import ModelError as ModelError


class Preset(enum.StrEnum):
    LLAMA3_DEBUG = "llama3-debug"
    LLAMA3_8B = "llama3-8b"
    LLAMA3_70B = "llama3-70b"
    MLPERF_LLAMA3_70B = "mlperf-llama3-70b"
    LLAMA3_405B = "llama3-405b"
    MLPERF_LLAMA3_1T = "mlperf-llama3-1t"


class Optimizer(enum.StrEnum):
    ADAMW = "adamw"
    NONE = "none"


class DtypeProfile(enum.StrEnum):
    """What each tensor is stored as.

    ``fp32``: torchtitan's default (FSDP2 keeps fp32 parameters; AdamW state fp32): 12 B/param.
    ``mlperf``: MLPerf Storage's accounting: fp16 weights plus fp32 master, exp_avg and
    exp_avg_sq, 14 B/param, and none of the small items, so totals equal MLPerf's to the byte.
    ``bf16``: every weight and moment in bf16 (6 B/param with AdamW; 2 B/param, a model-only
    export, without).
    """

    FP32 = "fp32"
    MLPERF = "mlperf"
    BF16 = "bf16"


DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

# torchtitan flattens each param group's settings per parameter: 12 pickled scalars.
PARAM_GROUP_KEYS = (
    "lr",
    "betas",
    "eps",
    "weight_decay",
    "amsgrad",
    "maximize",
    "foreach",
    "capturable",
    "differentiable",
    "fused",
    "decoupled_weight_decay",
    "initial_lr",
)


@dataclass(frozen=True)
class Architecture:
    """A Llama 3 transformer's hyper-parameters (torchtitan's ``TransformerModelArgs``)."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    multiple_of: int
    ffn_dim_multiplier: float | None
    ffn_hidden: int | None = None  # given outright (MLPerf's 1T), not derived from dim

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def ffn_dim(self) -> int:
        if self.ffn_hidden is not None:
            return self.ffn_hidden
        # torchtitan's FeedForward: int(2 * 4 * dim / 3), times the multiplier, rounded up.
        hidden = int(2 * (4 * self.dim) / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        return self.multiple_of * math.ceil(hidden / self.multiple_of)


PRESETS: dict[str, Architecture] = {
    Preset.LLAMA3_DEBUG: Architecture(256, 6, 16, 16, 2048, 256, None),
    Preset.LLAMA3_8B: Architecture(4096, 32, 32, 8, 128256, 1024, 1.3),
    Preset.LLAMA3_70B: Architecture(8192, 80, 64, 8, 128256, 4096, 1.3),
    # MLPerf Storage's llama3_70b.yaml has 128 attention heads (head_dim 64), hence fewer params.
    Preset.MLPERF_LLAMA3_70B: Architecture(8192, 80, 128, 8, 128256, 4096, 1.3),
    Preset.LLAMA3_405B: Architecture(16384, 126, 128, 8, 128256, 4096, 1.2),
    # MLPerf Storage's llama3_1t.yaml (mlcommons/storage configs/dlio/workload): hidden 25872,
    # 128 layers, 192 heads (head_dim 134, floored), 32 kv heads, ffn 98304 given outright.
    Preset.MLPERF_LLAMA3_1T: Architecture(25872, 128, 192, 32, 128256, 256, None, ffn_hidden=98304),
}


class MlperfCheckpoint(NamedTuple):
    """An MLPerf Storage v3.0 checkpointing model: its CLOSED process count and the checkpoint
    size MLPerf publishes for it (GiB, which MLPerf labels "GB")."""

    processes: int
    published_gib: float


# MLPerf Storage v3.0's four checkpointing models, by the preset that builds the same checkpoint
# (14 B/param: the ``mlperf`` dtype profile). Published sizes: docs/models.md.
MLPERF_V3: dict[str, MlperfCheckpoint] = {
    Preset.LLAMA3_8B: MlperfCheckpoint(8, 104.7),
    Preset.MLPERF_LLAMA3_70B: MlperfCheckpoint(64, 911.2),
    Preset.LLAMA3_405B: MlperfCheckpoint(512, 5291.7),
    Preset.MLPERF_LLAMA3_1T: MlperfCheckpoint(1024, 18 * 1024.0),
}


def architecture(preset: str, layers: int | None = None, vocab: int | None = None) -> Architecture:
    """The preset's architecture with the layer count and vocabulary overridden where given."""
    if preset not in PRESETS:
        raise ModelError(f"model: unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    arch = PRESETS[preset]
    if layers is not None:
        if layers < 1:
            raise ModelError(f"layers: must be at least 1 (got {layers})")
        arch = replace(arch, n_layers=layers)
    if vocab is not None:
        if vocab < 1:
            raise ModelError(f"vocab: must be at least 1 (got {vocab})")
        arch = replace(arch, vocab_size=vocab)
    return arch


@dataclass(frozen=True)
class Param:
    fqn: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def row_elements(self) -> int:
        return math.prod(self.shape[1:])


def parameters(arch: Architecture) -> list[Param]:
    """Every parameter tensor, in torchtitan's state-dict order and names."""
    d, hd = arch.dim, arch.head_dim
    out = [Param("tok_embeddings.weight", (arch.vocab_size, d))]
    for i in range(arch.n_layers):
        p = f"layers.{i}."
        out += [
            Param(p + "attention.wq.weight", (arch.n_heads * hd, d)),
            Param(p + "attention.wk.weight", (arch.n_kv_heads * hd, d)),
            Param(p + "attention.wv.weight", (arch.n_kv_heads * hd, d)),
            Param(p + "attention.wo.weight", (d, arch.n_heads * hd)),
            Param(p + "feed_forward.w1.weight", (arch.ffn_dim, d)),
            Param(p + "feed_forward.w2.weight", (d, arch.ffn_dim)),
            Param(p + "feed_forward.w3.weight", (arch.ffn_dim, d)),
            Param(p + "attention_norm.weight", (d,)),
            Param(p + "ffn_norm.weight", (d,)),
        ]
    out += [Param("norm.weight", (d,)), Param("output.weight", (arch.vocab_size, d))]
    return out


def parameter_count(arch: Architecture) -> int:
    return sum(p.numel for p in parameters(arch))


def model_names() -> list[str]:
    """What ``model`` takes by name: the Llama 3 presets, then the shipped Hugging Face configs
    (or else a path to a config.json)."""
    return [*PRESETS, *hf_shapes.SHIPPED]


@dataclass(frozen=True)
class StateTensor:
    """One tensor of the checkpoint. ``sharded``: a ``Shard(0)`` DTensor; else replicated."""

    key: str
    shape: tuple[int, ...]
    dtype: str
    sharded: bool
    param_index: int  # which parameter it belongs to (content seeds use it)
    role: int  # 0 weight, 1 exp_avg, 2 exp_avg_sq, 3 master, 4 step

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape[1:]) * self.itemsize


@dataclass(frozen=True)
class ModelSpec:
    """A preset or Hugging Face config (``preset``: a name or a config.json path) with its
    overrides and profile: everything that decides the checkpoint's shape."""

    preset: str
    layers: int | None = None
    vocab: int | None = None
    optimizer: Optimizer = Optimizer.ADAMW
    dtype: DtypeProfile = DtypeProfile.FP32

    @property
    def arch(self) -> Architecture:
        return architecture(self.preset, self.layers, self.vocab)

    def describe(self) -> str:
        over = [f"{n} {v}" for n, v in (("layers", self.layers), ("vocab", self.vocab)) if v]
        extra = f" ({', '.join(over)})" if over else ""
        return f"{self.preset}{extra}, optimizer {self.optimizer.value}, dtype {self.dtype.value}"


@functools.lru_cache(maxsize=32)
def _model_parameters(preset: str, layers: int | None, vocab: int | None) -> tuple[Param, ...]:
    if preset in PRESETS:
        return tuple(parameters(architecture(preset, layers, vocab)))
    config = hf_shapes.effective_config(preset, layers, vocab)
    return tuple(Param(name, shape) for name, shape in hf_shapes.hf_parameters(config))


def model_parameters(spec: ModelSpec) -> list[Param]:
    """Every parameter of the spec's model: a Llama 3 preset's (torchtitan's names) or a Hugging
    Face config's (transformers' names, ``hf_shapes``), with its overrides."""
    if spec.layers is not None and spec.layers < 1:
        raise ModelError(f"layers: must be at least 1 (got {spec.layers})")
    if spec.vocab is not None and spec.vocab < 1:
        raise ModelError(f"vocab: must be at least 1 (got {spec.vocab})")
    return list(_model_parameters(spec.preset, spec.layers, spec.vocab))


def dimensions(spec: ModelSpec) -> tuple[int, int | None]:
    """(layers, vocabulary size) of the spec's model, overrides applied; no vocabulary: None."""
    if spec.preset in PRESETS:
        arch = architecture(spec.preset, spec.layers, spec.vocab)
        return arch.n_layers, arch.vocab_size
    config = hf_shapes.effective_config(spec.preset, spec.layers, spec.vocab)
    layers = int(config[hf_shapes.family(config)[2][0]])
    return layers, config.get("vocab_size")


WEIGHT_DTYPES = {"fp32": "float32", "mlperf": "float16", "bf16": "bfloat16"}


def state_tensors(spec: ModelSpec) -> list[StateTensor]:
    """The checkpoint's tensors, as torchtitan flattens model and optimizer state."""
    weight_dtype = WEIGHT_DTYPES[spec.dtype.value]
    moment_dtype = "bfloat16" if spec.dtype is DtypeProfile.BF16 else "float32"
    params = model_parameters(spec)
    out = [StateTensor(p.fqn, p.shape, weight_dtype, True, i, 0) for i, p in enumerate(params)]
    if spec.optimizer is Optimizer.NONE:
        return out
    for i, p in enumerate(params):
        state = f"optimizer.state.{p.fqn}."
        if spec.dtype is DtypeProfile.MLPERF:
            out.append(StateTensor(state + "master", p.shape, "float32", True, i, 3))
        out.append(StateTensor(state + "exp_avg", p.shape, moment_dtype, True, i, 1))
        out.append(StateTensor(state + "exp_avg_sq", p.shape, moment_dtype, True, i, 2))
        if spec.dtype is not DtypeProfile.MLPERF:
            out.append(StateTensor(state + "step", (), "float32", False, i, 4))
    return out


def param_group_keys(spec: ModelSpec) -> list[str]:
    """The pickled items: AdamW's settings per parameter, outside the mlperf profile."""
    if spec.optimizer is Optimizer.NONE or spec.dtype is DtypeProfile.MLPERF:
        return []
    return [
        f"optimizer.param_groups.{p.fqn}.{name}"
        for p in model_parameters(spec)
        for name in PARAM_GROUP_KEYS
    ]


# torchtitan's CheckpointManager saves, beside model and optimizer, three small Stateful parts,
# flattened by DCP to one pickled item per key: the LR schedulers' ``last_epoch`` (the same on
# every rank), the trainer's ``step`` and ``ntokens_seen`` (the same), and the dataloader's
# ``world_size`` (the same) and ``dp_rank_<r>``: each rank's own pickled StatefulDataLoader state,
# written by that rank only. Part of a training checkpoint, so not of a model-only one
# (``optimizer none``) nor of MLPerf's accounting (``mlperf``).
SMALL_ITEM_KEYS = (
    "lr_scheduler.last_epoch",
    "train_state.step",
    "train_state.ntokens_seen",
    "dataloader.world_size",
)


def has_small_items(spec: ModelSpec) -> bool:
    return spec.optimizer is Optimizer.ADAMW and spec.dtype is not DtypeProfile.MLPERF


def dataloader_key(rank: int) -> str:
    return f"dataloader.dp_rank_{rank}"


def small_item_keys(spec: ModelSpec, rank: int) -> list[str]:
    """The small items rank ``rank`` saves and loads: the replicated ones, then its own."""
    if not has_small_items(spec):
        return []
    return [*SMALL_ITEM_KEYS, dataloader_key(rank)]


def chunk_rows(d0: int, world_size: int, rank: int) -> tuple[int, int]:
    """``(offset, rows)`` of rank's slice of a dim-0 length ``d0`` under ``torch.chunk``.

    ``c = ceil(d0 / N)``; rank r owns ``[min(r*c, d0), min((r+1)*c, d0))``, empty past the end.
    """
    c = -(-d0 // world_size)
    start = min(rank * c, d0)
    return start, min(start + c, d0) - start


def local_shape(t: StateTensor, world_size: int, rank: int) -> tuple[int, ...]:
    if not t.sharded:
        return t.shape
    return (chunk_rows(t.shape[0], world_size, rank)[1], *t.shape[1:])


def rank_bytes(tensors: list[StateTensor], world_size: int, rank: int) -> int:
    """The tensor bytes rank ``rank`` holds: its rows of every sharded tensor, every replica."""
    total = 0
    for t in tensors:
        if t.sharded:
            total += chunk_rows(t.shape[0], world_size, rank)[1] * t.row_bytes
        else:
            total += t.nbytes
    return total


def iter_sharded(tensors: list[StateTensor]) -> Iterator[StateTensor]:
    return (t for t in tensors if t.sharded)


# .metadata is a pickled Metadata: per key a TensorStorageMetadata (or BytesStorageMetadata) and a
# planner mapping, per (tensor, rank) a chunk and a storage entry naming the key again, so it grows
# with tensors x ranks and with the length of the names. Bytes per entry and per character, fitted
# on pickles of the same structure (torch 2.13); a test compares with a real .metadata.
METADATA_HEADER_BYTES = 1700
METADATA_BYTES_PER_KEY = 57
METADATA_BYTES_PER_CHUNK = 137
METADATA_BYTES_PER_BYTE_ITEM = 106


def metadata_bytes_estimate(
    tensors: list[StateTensor], byte_keys: list[str], world_size: int
) -> int:
    # With one rank, a key and its planner mapping are one pickled string; with more, two.
    copies = 2 if world_size > 1 else 1
    total = METADATA_HEADER_BYTES + METADATA_BYTES_PER_BYTE_ITEM * len(byte_keys)
    for key in byte_keys:
        total += METADATA_BYTES_PER_KEY + copies * len(key)
    for t in tensors:
        total += METADATA_BYTES_PER_KEY + copies * len(t.key)
        if t.sharded:
            total += world_size * (METADATA_BYTES_PER_CHUNK + len(t.key))
        else:
            total += len(t.key)
    return total


@dataclass(frozen=True)
class ModelSizes:
    """What a run of ``spec`` on ``world_size`` ranks holds and writes, before anything exists."""

    spec: ModelSpec
    world_size: int
    parameters: int
    parameter_tensors: int
    sharded_tensors: int
    replicated_tensors: int
    byte_items: int  # pickled items on every rank (written once): param groups, small items
    rank_byte_items: int  # pickled items each rank has alone (the dataloader's state)
    total_bytes: int  # tensor payload, each replicated tensor counted once
    largest_rank_bytes: int  # rank 0: torch.chunk gives the lowest ranks the most rows
    smallest_rank_bytes: int
    largest_item_bytes: int  # the biggest local shard of one tensor (a read/serialise buffer)
    empty_shards: int  # (tensor, rank) pairs with no rows: dim 0 < world size
    metadata_bytes: int

    @property
    def tensors(self) -> int:
        return self.sharded_tensors + self.replicated_tensors

    @property
    def items_per_rank(self) -> int:
        """Write items each rank plans: one per tensor (empty shards too) and per pickled item."""
        return self.tensors + self.byte_items + self.rank_byte_items

    @property
    def stored_items(self) -> int:
        """Items in the checkpoint once replicated ones are written by one rank only."""
        shared = self.replicated_tensors + self.byte_items
        return (self.sharded_tensors + self.rank_byte_items) * self.world_size + shared

    @property
    def bytes_per_parameter(self) -> float:
        return self.total_bytes / self.parameters


def model_sizes(spec: ModelSpec, world_size: int) -> ModelSizes:
    if world_size < 1:
        raise ModelError(f"world_size: must be at least 1 (got {world_size})")
    tensors = state_tensors(spec)
    sharded = [t for t in tensors if t.sharded]
    replicated = [t for t in tensors if not t.sharded]
    small = has_small_items(spec)
    shared_keys = [*param_group_keys(spec), *(SMALL_ITEM_KEYS if small else ())]
    rank_keys = [dataloader_key(r) for r in range(world_size)] if small else []
    pairs = [(t, chunk_rows(t.shape[0], world_size, 0)[1]) for t in sharded]
    # c rows a rank: ceil(d0 / c) ranks hold rows, the others an empty shard.
    empty = sum(world_size - -(-t.shape[0] // c) for t, c in pairs if c)
    return ModelSizes(
        spec=spec,
        world_size=world_size,
        parameters=sum(p.numel for p in model_parameters(spec)),
        parameter_tensors=len(model_parameters(spec)),
        sharded_tensors=len(sharded),
        replicated_tensors=len(replicated),
        byte_items=len(shared_keys),
        rank_byte_items=1 if small else 0,
        total_bytes=sum(t.nbytes for t in tensors),
        largest_rank_bytes=rank_bytes(tensors, world_size, 0),
        smallest_rank_bytes=rank_bytes(tensors, world_size, world_size - 1),
        largest_item_bytes=max((c * t.row_bytes for t, c in pairs), default=0),
        empty_shards=empty,
        metadata_bytes=metadata_bytes_estimate(tensors, shared_keys + rank_keys, world_size),
    )
