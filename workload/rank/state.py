"""The synthetic sharded state: the reference's ``dummy_tensor_{i}``, fast to make and check.

Shapes and ownership are the reference's: ``padding_size`` float32 tensors of shape
``(layer_size, 1000)``, tensor ``i`` on rank ``i % world_size``. The content is ours: every
``BLOCK``-element chunk of a tensor is one seeded random block plus an offset hashed from
``(seed, tensor index, chunk number)``. Writing a chunk is one vectorised add from a block that
stays in cache, so building runs at memory speed (``randn`` over gigabytes would take seconds),
and any rank can recompute what it should have loaded. Every value is an integer below 2**23,
so float32 holds it exactly and comparisons can be bitwise.

A model preset (``config.model``) is built, templated and verified by :mod:`.model_state`
instead: the functions here hand over to it, so the loop calls one set of functions for both
layouts. What the two layouts share (the block and the hash) is in :mod:`.content`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch

from ckptbench.workload.contract.checkpoint import sizes
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.rank import model_state
from ckptbench.workload.rank.content import BLOCK, splitmix64
from ckptbench.workload.rank.failures import VerificationError

_BASE_LIMIT = 1 << 20  # block values are in [1, 2**20)
_OFFSET_LIMIT = 1 << 22  # chunk offsets are in [0, 2**22): sums stay below 2**23, exact in float32


def tensor_name(index: int) -> str:
    return f"dummy_tensor_{index}"


def owned_names(config: WorkloadConfig) -> list[str]:
    return [tensor_name(i) for i in config.held_indices()]


def tensor_shape(config: WorkloadConfig) -> tuple[int, int]:
    return (config.layer_size, sizes.COLUMNS)


@functools.lru_cache(maxsize=4)
def _base_block(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    ints = torch.randint(1, _BASE_LIMIT, (BLOCK,), generator=gen, dtype=torch.int32)
    return ints.to(torch.float32)


def _chunk_offset(seed: int, index: int, chunk: int) -> float:
    # Distinct offsets per chunk make a misplaced chunk (or a tensor saved under another name)
    # show up, which a plain tiling of one block would hide.
    h = splitmix64(splitmix64(splitmix64(seed) ^ index) ^ chunk)
    return float(h % _OFFSET_LIMIT)


def _chunks(numel: int) -> range:
    return range(0, numel, BLOCK)


def fill_expected(out: torch.Tensor, seed: int, index: int) -> torch.Tensor:
    """Write tensor ``index``'s expected content into the contiguous float32 tensor ``out``."""
    flat = out.view(-1)
    base = _base_block(seed)
    numel = flat.numel()
    for start in _chunks(numel):
        stop = min(start + BLOCK, numel)
        torch.add(
            base[: stop - start], _chunk_offset(seed, index, start // BLOCK), out=flat[start:stop]
        )
    return out


def expected_tensor(config: WorkloadConfig, index: int) -> torch.Tensor:
    return fill_expected(torch.empty(tensor_shape(config), dtype=torch.float32), config.seed, index)


def build_state(config: WorkloadConfig) -> dict[str, Any]:
    """This rank's shard: its own tensors, in index order (or a model preset's, as DTensors)."""
    if config.model is not None:
        return model_state.build_state(config)
    return {tensor_name(i): expected_tensor(config, i) for i in config.held_indices()}


def save_group(config: WorkloadConfig) -> Any:
    """The process group this rank's DCP save runs in: None for every rank of the run, or the
    saving ranks' own when a restore onto more ranks added ranks that only load."""
    if config.model is not None:
        return model_state.save_group(config)
    return None


def empty_template(config: WorkloadConfig) -> dict[str, Any]:
    """Uninitialised tensors of this rank's keys, for DCP to load into in place."""
    if config.model is not None:
        return model_state.empty_template(config)
    shape = tensor_shape(config)
    return {name: torch.empty(shape, dtype=torch.float32) for name in owned_names(config)}


def tensor_bytes(template: Mapping[str, Any]) -> int:
    """Tensor bytes a template holds on this rank (a DTensor's local rows): what a load reads."""
    total = 0
    for tensor in template.values():
        if hasattr(tensor, "to_local"):
            tensor = tensor.to_local()
        if isinstance(tensor, torch.Tensor):
            total += tensor.numel() * tensor.element_size()
    return total


def mark_unwritten(template: Mapping[str, Any]) -> None:
    """Fill every tensor with NaN before a load, outside its timing.

    A load that skips any element then fails verification: ``torch.empty`` may hand back the
    memory of the shard just saved, which already holds the expected values, and a reused template
    holds the previous load's. Filling also touches every page of a fresh template here, so the
    timed load does not pay the kernel's first touch of its destination (a few hundred ms per GiB).
    """
    for tensor in template.values():
        if hasattr(tensor, "to_local"):  # a model preset's DTensor: mark this rank's rows
            tensor = tensor.to_local()
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            tensor.fill_(float("nan"))


def verify(state: Mapping[str, Any], config: WorkloadConfig) -> None:
    """Check every one of this rank's tensors bit for bit; raise :class:`VerificationError`."""
    if config.model is not None:
        model_state.verify(state, config)
        return
    bad: list[str] = []
    details: list[str] = []
    shape = tensor_shape(config)
    expected_names = set(owned_names(config))
    for name in sorted(set(state) - expected_names):
        bad.append(name)
        details.append(f"{name}: not a key of this rank")
    scratch = torch.empty(BLOCK, dtype=torch.float32)
    for i in config.held_indices():
        name = tensor_name(i)
        problem = _check_tensor(state.get(name), name, shape, config.seed, i, scratch)
        if problem is not None:
            bad.append(name)
            details.append(problem)
    if bad:
        raise VerificationError(config.rank, bad, details)


def _check_tensor(
    tensor: torch.Tensor | None,
    name: str,
    shape: tuple[int, int],
    seed: int,
    index: int,
    scratch: torch.Tensor,
) -> str | None:
    if tensor is None:
        return f"{name}: missing"
    if tensor.dtype != torch.float32 or tuple(tensor.shape) != shape:
        return f"{name}: expected float32 {shape}, got {tensor.dtype} {tuple(tensor.shape)}"
    flat = tensor.reshape(-1)
    base = _base_block(seed)
    numel = flat.numel()
    differing = 0
    first: str | None = None
    for start in _chunks(numel):
        stop = min(start + BLOCK, numel)
        want = scratch[: stop - start]
        torch.add(base[: stop - start], _chunk_offset(seed, index, start // BLOCK), out=want)
        got = flat[start:stop]
        # Bitwise, so NaN payloads and -0.0 count as differences too.
        if torch.equal(got.view(torch.int32), want.view(torch.int32)):
            continue
        wrong = (got.view(torch.int32) != want.view(torch.int32)).nonzero().view(-1)
        differing += wrong.numel()
        if first is None:
            k = int(wrong[0])
            element = start + k
            row, col = divmod(element, sizes.COLUMNS)
            first = (
                f"first at element {element} (row {row}, column {col}): "
                f"expected {float(want[k])!r}, got {float(got[k])!r}"
            )
    if differing == 0:
        return None
    return f"{name}: {differing} of {numel} elements differ, {first}"
