"""A model preset's state on one rank, as FSDP2 leaves it: local rows wrapped as DTensors.

Each rank builds only its own ``Shard(0)`` rows of every tensor listed by
``contract/checkpoint/models.py`` and wraps them with ``DTensor.from_local`` on a CPU device mesh
over the gloo group, so DCP plans one shard per (tensor, rank) with its global offset, writes real
sharded metadata, and loads through its resharding planner. Replicated items (AdamW's ``step`` and
the pickled ``param_groups`` scalars) are plain values, the same on every rank.

Content is a function of (seed, key, global element index): the global flat index ``g`` holds
``base[g % BLOCK] + offset(seed, key, g // BLOCK)``. A rank fills any slice from it with one
vectorised add per block, at the reference layout's build rate, and after a reshard each rank can
still compute what its new rows must hold. float32 values are integers below 2**23 (exact); 16-bit
dtypes hold bit patterns below 0x7C00, finite in both float16 and bfloat16, compared bitwise.
"""

from __future__ import annotations

import functools
import hashlib
import math
import pickle
from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Shard

from ckptbench.workload.contract.checkpoint import models
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.rank import hf_meta
from ckptbench.workload.rank.content import BLOCK, splitmix64
from ckptbench.workload.rank.failures import VerificationError

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_F32_BASE, _F32_OFFSET = 1 << 20, 1 << 22  # sums below 2**23: exact in float32
_I16_BASE, _I16_OFFSET = 1 << 14, 15_000  # sums below 0x7C00: finite in float16 and bfloat16
_UNREAD = "<not loaded>"

# AdamW's settings as torchtitan's default job config sets them; pickled per parameter.
PARAM_GROUP_VALUES: dict[str, Any] = {
    "lr": 8e-4,
    "betas": (0.9, 0.95),
    "eps": 1e-8,
    "weight_decay": 0.1,
    "amsgrad": False,
    "maximize": False,
    "foreach": None,
    "capturable": False,
    "differentiable": False,
    "fused": None,
    "decoupled_weight_decay": True,
    "initial_lr": 8e-4,
}


# torchtitan's small items (see contract/checkpoint/models.py): values a run of ``seed`` would have
# reached.
TOKENS_PER_STEP = 8 * 8192  # ntokens_seen grows by the global batch: 8 sequences of 8,192
TOKEN_BUFFER = 4096  # tokens a text dataset holds between samples: half a sequence, on average
VOCAB = 128_256


def train_step(seed: int) -> int:
    return 1 + splitmix64(splitmix64(seed) ^ 0x5EED) % 100_000


def dataloader_state(seed: int, rank: int) -> bytes:
    """Rank's pickled StatefulDataLoader state as torchtitan saves it: counters and the dataset's
    position with its token buffer, different on every rank."""
    step = train_step(seed)
    gen = torch.Generator().manual_seed(
        splitmix64(seed ^ key_hash(models.dataloader_key(rank))) >> 1
    )
    tokens = torch.randint(0, VOCAB, (TOKEN_BUFFER,), generator=gen).tolist()
    state = {
        "_num_yielded": step,
        "_sampler_iter_yielded": step,
        "_iterator_finished": False,
        "dataset_state": {"sample_idx": step * 8 + rank, "token_buffer": tokens},
    }
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def small_items(spec: models.ModelSpec, seed: int, saved_world: int, rank: int) -> dict[str, Any]:
    """The small items ``rank`` holds, for a checkpoint saved by ``saved_world`` ranks.

    A rank past ``saved_world`` (a restore onto more ranks) has no dataloader state of its own
    in the checkpoint, as a torchtitan job restarted on more ranks has none for its new ones.
    """
    if not models.has_small_items(spec):
        return {}
    step = train_step(seed)
    items: dict[str, Any] = {
        "lr_scheduler.last_epoch": step,
        "train_state.step": step,
        "train_state.ntokens_seen": step * TOKENS_PER_STEP,
        "dataloader.world_size": saved_world,
    }
    if rank < saved_world:
        items[models.dataloader_key(rank)] = dataloader_state(seed, rank)
    return items


@functools.lru_cache(maxsize=8)
def _base(seed: int, wide: bool) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if wide:
        return torch.randint(1, _F32_BASE, (BLOCK,), generator=gen, dtype=torch.int32).float()
    return torch.randint(0, _I16_BASE, (BLOCK,), generator=gen, dtype=torch.int16)


@functools.lru_cache(maxsize=65536)
def key_hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def _offset(seed: int, key: str, block: int, limit: int) -> int:
    return splitmix64(splitmix64(splitmix64(seed) ^ key_hash(key)) ^ block) % limit


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A flat view to fill: float32 as is (integer values), 16-bit dtypes as int16 bit patterns."""
    return t.view(-1) if t.dtype == torch.float32 else t.view(-1).view(torch.int16)


def fill_slice(out: torch.Tensor, seed: int, key: str, start: int) -> torch.Tensor:
    """Fill ``out`` (contiguous) with the key's content from global flat element ``start``."""
    flat = _bits(out)
    wide = out.dtype == torch.float32
    base = _base(seed, wide)
    limit = _F32_OFFSET if wide else _I16_OFFSET
    end = start + flat.numel()
    g = start
    while g < end:
        block, within = divmod(g, BLOCK)
        stop = min(end, (block + 1) * BLOCK)
        offset = _offset(seed, key, block, limit)
        value = float(offset) if wide else offset
        torch.add(base[within : within + stop - g], value, out=flat[g - start : stop - start])
        g = stop
    return out


@functools.lru_cache(maxsize=4)
def _mesh(size: int, ranks: int) -> DeviceMesh:
    """A 1-D CPU mesh over the first ``size`` of the run's ``ranks`` ranks, made once (each one
    creates gloo groups).

    Every rank must make it, members or not: creating its groups is collective.
    """
    if size == ranks:
        return init_device_mesh("cpu", (size,))
    return DeviceMesh("cpu", list(range(size)))


def _save_mesh(config: WorkloadConfig) -> DeviceMesh:
    """The saving ranks' mesh: the first ``world_size`` of the run's ranks."""
    return _mesh(config.world_size, config.rank_count)


def save_group(config: WorkloadConfig) -> Any:
    """The process group DCP saves with: None (every rank) unless a restore onto more ranks
    added ranks that do not save; then the saving ranks' own group, which only they may use."""
    if config.rank_count == config.world_size:
        return None
    if not config.saves:
        raise ValueError(f"rank {config.rank} does not save (world_size {config.world_size})")
    return _save_mesh(config).get_group()


def _load_view(config: WorkloadConfig) -> WorkloadConfig | None:
    """The config this rank loads and verifies as: the load world's, or None when it sits out.

    With ``load_world_size`` M < N, the first M ranks reshard the N-rank checkpoint into M pieces
    (DCP reads each saved chunk overlapping a rank's new rows and narrows it); the others take
    part in the load's collectives with nothing to read. With M > N the run has M ranks: all of
    them load their rows of the M-rank mesh, the last M - N having saved nothing.
    """
    m = config.load_world_size
    if m is None or m == config.world_size:
        return config
    if config.rank >= m:
        return None
    return config.model_copy(update={"world_size": m})


def _local(t: models.StateTensor, config: WorkloadConfig) -> tuple[torch.Tensor, int]:
    """(uninitialised local rows, global flat index of the first) of a sharded tensor."""
    offset, rows = models.chunk_rows(t.shape[0], config.world_size, config.rank)
    local = torch.empty((rows, *t.shape[1:]), dtype=_DTYPES[t.dtype])
    return local, offset * (t.row_bytes // t.itemsize)


def _wrap(local: torch.Tensor, t: models.StateTensor, mesh: DeviceMesh) -> DTensor:
    stride = tuple(math.prod(t.shape[i + 1 :]) for i in range(len(t.shape)))
    return DTensor.from_local(
        local, mesh, [Shard(0)], run_check=False, shape=torch.Size(t.shape), stride=stride
    )


def _spec(config: WorkloadConfig) -> models.ModelSpec:
    spec = config.model_spec
    if spec is None:
        raise ValueError("model_state needs a model preset in the config")
    return spec


def _step_value(config: WorkloadConfig, key: str) -> torch.Tensor:
    return fill_slice(torch.empty((), dtype=torch.float32), config.seed, key, 0)


def model_refusal(config: WorkloadConfig) -> str | None:
    """Why this rank's Hugging Face model cannot run as it was sized (transformers builds other
    parameters than the sizes counted), or None; the worker asks before its rendezvous."""
    spec = config.model_spec
    if spec is None or spec.preset in models.PRESETS:
        return None
    try:
        hf_meta.check(spec)
    except models.ModelError as exc:
        return str(exc)
    return None


def build_state(config: WorkloadConfig) -> dict[str, Any]:
    """This rank's state: its rows of every sharded tensor, every replicated item; nothing on a
    rank that does not save (a restore onto more ranks), which still makes the saving mesh."""
    mesh = _save_mesh(config)
    if not config.saves:
        return {}
    return _state(config, mesh, fill=True, saved_world=config.world_size)


def empty_template(config: WorkloadConfig) -> dict[str, Any]:
    """The keys and local shapes this rank loads (in the load world), uninitialised."""
    view = _load_view(config)
    mesh = _mesh(config.load_world_size or config.world_size, config.rank_count)
    if view is None:
        return {}
    return _state(view, mesh, fill=False, saved_world=config.world_size)


def _state(
    config: WorkloadConfig, mesh: DeviceMesh, *, fill: bool, saved_world: int
) -> dict[str, Any]:
    spec = _spec(config)
    refused = model_refusal(config)
    if refused is not None:
        raise models.ModelError(refused)
    out: dict[str, Any] = {}
    for t in models.state_tensors(spec):
        if t.sharded:
            local, start = _local(t, config)
            if fill:
                fill_slice(local, config.seed, t.key, start)
            out[t.key] = _wrap(local, t, mesh)
        else:
            value = torch.empty((), dtype=_DTYPES[t.dtype])
            out[t.key] = _step_value(config, t.key) if fill else value
    for key in models.param_group_keys(spec):
        out[key] = PARAM_GROUP_VALUES[key.rsplit(".", 1)[1]] if fill else _UNREAD
    for key, value in small_items(spec, config.seed, saved_world, config.rank).items():
        out[key] = value if fill else _UNREAD
    return out


def verify(state: Mapping[str, Any], config: WorkloadConfig) -> None:
    """Check every key of this rank bit for bit; raise :class:`VerificationError` naming them.

    After a resharding load, what this rank holds in the load world is checked.
    """
    view = _load_view(config)
    if view is None:
        if state:
            keys = sorted(state)
            raise VerificationError(config.rank, keys, ["a rank outside the load world loaded"])
        return
    saved_world, config = config.world_size, view
    spec = _spec(config)
    bad: list[str] = []
    details: list[str] = []
    tensors = models.state_tensors(spec)
    scalars = {k: PARAM_GROUP_VALUES[k.rsplit(".", 1)[1]] for k in models.param_group_keys(spec)}
    scalars.update(small_items(spec, config.seed, saved_world, config.rank))
    expected = {t.key for t in tensors} | set(scalars)
    for key in sorted(set(state) - expected):
        bad.append(key)
        details.append(f"{key}: not a key of this checkpoint")
    scratch: dict[torch.dtype, torch.Tensor] = {}
    for t in tensors:
        problem = _check_tensor(state.get(t.key), t, config, scratch)
        if problem is not None:
            bad.append(t.key)
            details.append(problem)
    for key, want in scalars.items():
        got = state.get(key, _UNREAD)
        if got != want or type(got) is not type(want):
            bad.append(key)
            details.append(f"{key}: expected {_short(want)}, got {_short(got)}")
    if bad:
        raise VerificationError(config.rank, bad, details)


def _short(value: Any) -> str:
    if isinstance(value, bytes):  # a pickled dataloader state: its size and a digest, not 16 KB
        digest = hashlib.blake2b(value, digest_size=4).hexdigest()
        return f"{len(value)} pickled bytes ({digest})"
    return repr(value)


def _check_tensor(
    value: Any,
    t: models.StateTensor,
    config: WorkloadConfig,
    scratch: dict[torch.dtype, torch.Tensor],
) -> str | None:
    if value is None:
        return f"{t.key}: missing"
    dtype = _DTYPES[t.dtype]
    if t.sharded:
        if not isinstance(value, DTensor):
            return f"{t.key}: expected a DTensor, got {type(value).__name__}"
        got = value.to_local()
        want_shape = models.local_shape(t, config.world_size, config.rank)
        start = models.chunk_rows(t.shape[0], config.world_size, config.rank)[0]
        start *= t.row_bytes // t.itemsize
    else:
        if not isinstance(value, torch.Tensor) or isinstance(value, DTensor):
            return f"{t.key}: expected a plain tensor, got {type(value).__name__}"
        got, want_shape, start = value, t.shape, 0
    if got.dtype != dtype or tuple(got.shape) != want_shape:
        return (
            f"{t.key}: expected {t.dtype} {want_shape} locally, got {got.dtype} {tuple(got.shape)}"
        )
    return _compare(got.contiguous(), t.key, config.seed, start, scratch)


def _compare(
    got: torch.Tensor, key: str, seed: int, start: int, scratch: dict[torch.dtype, torch.Tensor]
) -> str | None:
    flat = _bits(got)
    wide = got.dtype == torch.float32
    numel = flat.numel()
    buf = scratch.get(got.dtype)
    if buf is None:
        buf = scratch[got.dtype] = torch.empty(BLOCK, dtype=got.dtype)
    differing = 0
    first: str | None = None
    pos = 0
    while pos < numel:
        # Compare along global block boundaries so each piece is one fill of the scratch.
        g = start + pos
        stop = min(numel, (g // BLOCK + 1) * BLOCK - start)
        want = _bits(fill_slice(buf[: stop - pos], seed, key, g))
        piece = flat[pos:stop]
        if wide:  # bitwise, so NaN payloads and -0.0 count as differences too
            piece, want = piece.view(torch.int32), want.view(torch.int32)
        if not torch.equal(piece, want):
            wrong = (piece != want).nonzero().view(-1)
            differing += wrong.numel()
            if first is None:
                k = int(wrong[0])
                first = (
                    f"first at global element {g + k}: expected bits {int(want[k])}, "
                    f"got {int(piece[k])}"
                )
        pos = stop
    if differing == 0:
        return None
    return f"{key}: {differing} of {numel} local elements differ, {first}"
