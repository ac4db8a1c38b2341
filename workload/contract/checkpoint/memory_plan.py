"""A rank's peak memory, estimated before anything is allocated, and the verdict on a budget.

What a rank's peak resident set holds (``bench/bench_memory_plan.py`` measures each case against
this; docs/measurement.md has the figures):

- **baseline**: the interpreter with torch, DCP, the backend's client and the gloo process group
  loaded. Calibrated per backend: the peak RSS of a rank whose state is two 4 KB tensors. A model
  preset adds DTensor and its device mesh (:data:`MODEL_RUNTIME_BYTES`).
- **state**: the shard the rank saves; the loop frees it before it allocates the load template,
  so the template replaces it (one of the two at a time). Exact: tensor payload bytes.
- **save phase**, on top of the state: an async save's staging copy (DCP copies the whole shard
  and holds the copy until the upload is durable; for a model's DTensors it first deep-copies
  each one, data included: the copies of tensors below 32 MiB come from the heap and stay
  resident), and what the backend buffers while writing:
  ``file`` nothing (``torch.save`` writes each tensor from its own storage); ``gcs`` the part
  buffers that small tensors are copied into (tensors from 1 MiB up are sent from their own
  memory); ``gcsfs`` copies of the largest item in fsspec's write buffer and gcsfs's upload chunks.
- **load phase**, on top of the template: ``file`` and ``gcsfs`` read each item whole and
  ``torch.load`` it into a new tensor before copying it into the template (two copies of the
  largest item; a resharding load reads a saved chunk whole and narrows it); ``gcs`` reads
  straight into the template in 1 MiB slices per transfer thread; and for a model the checkpoint's
  ``.metadata``, which every rank reads whole (its pickled size: a lower bound of the objects it
  unpickles into).

- **allocator slack**: glibc keeps free memory at the top of its heap up to its trim threshold,
  twice the mmap threshold, which its dynamic setting raises to the largest block freed (up to
  32 MiB). The blocks freed over and over are DCP's item buffers on ``file`` and ``gcsfs``: up to
  two of the largest tensors below 32 MiB stay resident after being freed. ``gcs`` reads into the
  template and writes from the tensors, so it frees no item-sized blocks.

- **checkpointer process** (``save_mode`` process): DCP's second process per rank, alive from
  the first save to the end of the run, in the same container: its own interpreter, torch, DCP,
  storage client and gloo (the backend's baseline) and the backend's write buffers. The staged
  copy reaches it through shared memory, the same pages as the rank's staging copy, counted once
  (there). Unless staging already went to shared memory (``staging_shared_memory``), the rank
  moves each staged tensor into shared memory as it sends it: one more copy of the largest item.
- **training step** (``train_every``): its three ``(N, N)`` float32 matrices.

peak = baseline + slack + training + checkpointer + max(state + save phase, template + load
phase).

It holds for the allocator setting the rank runs with (``rank/process/memory.py``): glibc's
defaults with freed memory trimmed once a saved shard is dropped (ckptbench and mlperf
procedures). Without the trim, glibc's dynamic mmap threshold keeps freed tensors of up to
32 MiB in the heap, and a rank can hold a second shard.
"""

from __future__ import annotations

from dataclasses import dataclass

from ckptbench.workload.contract.checkpoint import models, sizes
from ckptbench.workload.contract.checkpoint.sizes import format_bytes
from ckptbench.workload.contract.choices import Backend, SaveMode, Stager, Strategy
from ckptbench.workload.contract.data import memory as data_memory
from ckptbench.workload.contract.quantity import quantity
from ckptbench.workload.contract.settings import TRAIN_TARGET_MATRIX_MAX, BenchmarkSettings

MIB = 1024**2

# Peak RSS (MiB) of a rank with a negligible state: ``ckptbench run --layer-size 1
# --padding-size 2 --samples 1`` on 2 ranks, torch 2.13.0+cpu, Python 3.11, this VM, 2026-11-25
# (each repeated twice, within 1 MiB). ``gcs`` and ``gcsfs`` add their clients and transfer
# threads to ``file``'s interpreter, torch, DCP and gloo.
BASELINE_BYTES: dict[Backend, int] = {
    Backend.FILE: 292 * MIB,
    Backend.GCS: 318 * MIB,
    Backend.GCSFS: 339 * MIB,
    # s3 and s3fs: measured likewise with the embedded S3 server (moto), 2026-11-25.
    Backend.S3: 338 * MIB,
    Backend.S3FS: 356 * MIB,
    # dataflux: measured likewise on the embedded emulator behind the XML multipart shim,
    # gcs-torch-dataflux 1.4.0, 2026-11-28, twice (445 both times; gcs beside it in the same run
    # peaked at 341): the connector's imports (dataflux_core, its listing and multipart modules).
    Backend.DATAFLUX: 445 * MIB,
}
# What a model preset's rank holds beyond that: DTensor, its device mesh (gloo groups) and DCP's
# per-item planning objects. Measured: ``--model llama3-debug --layers 1 --vocab 256`` (197 items,
# 5.6 MiB of state) peaked at 330 MiB on ``file``, 292 + 5.6 + 32.
MODEL_RUNTIME_BYTES = 32 * MIB
# A Hugging Face model's rank also imports transformers and builds the model on the meta device
# (rank/hf_meta.py): RSS after torch and DCP grew by 72 to 75 MiB for each of mixtral-8x7b,
# qwen2-7b, t0-3b and vit-base (transformers 5.24.0, 2026-11-28), the modules it loads, not the
# model's size.
TRANSFORMERS_BYTES = 75 * MIB
# storage/gcs/parts.py's ZERO_COPY_MIN_BYTES: smaller writes are copied into a part buffer.
ZERO_COPY_MIN_BYTES = 1 << 20
# storage/gcs/objects.py's _READ_SLICE: each transfer thread reads a range in slices this big, and
# holds the slice urllib3 returns besides the one it is filling.
READ_SLICE_BYTES = 1 << 20
SLICES_PER_THREAD = 2
# fsspec's write buffer holds a written item; gcsfs's upload copies it out (getvalue) and slices
# chunks off that copy while the next write fills a fresh buffer. Measured 3 to 6 copies of the
# item at the peak besides the slack (reference layout 10000 x 8 and 8192 x 16, 2 ranks, six
# runs: 600-685 and 810-1024 MiB); 5 counted. gcsfs is the least predictable of the three.
GCSFS_WRITE_COPIES = 5
# DCP's FileSystemReader: the item's bytes read whole, then the tensor torch.load makes of them.
READ_COPIES = 2
# glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: under its dynamic threshold, blocks below this can
# come from the heap (and leave holes when freed); larger ones are always mapped and unmapped.
HEAP_BLOCK_MAX_BYTES = 32 * MIB
# glibc's dynamic trim threshold: twice the (dynamic) mmap threshold.
TRIM_THRESHOLD_BLOCKS = 2
TRAIN_MATRICES = 3  # the training step's a, b and out


@dataclass(frozen=True)
class RankLoad:
    """What a rank's memory depends on, computed from the config before anything runs."""

    backend: Backend
    shard_bytes: int  # the largest rank's payload (saved, or loaded when a load reshards)
    largest_item_bytes: int  # the biggest single item: one local tensor, or a saved chunk
    async_save: bool
    metadata_bytes: int = 0  # .metadata, pickled, read by every rank on load (models only)
    model: bool = False
    transformers: bool = False  # a Hugging Face model: transformers and its meta build
    copied_bytes: int = 0  # gcs: payload in tensors below ZERO_COPY_MIN_BYTES
    heap_bytes: int = 0  # payload in tensors below HEAP_BLOCK_MAX_BYTES
    heap_item_bytes: int = 0  # the largest of those tensors
    threads: int = 8  # gcs transfer threads
    part_size_bytes: int = 32 * MIB  # gcs upload part size
    save_mode: SaveMode | None = None  # None: thread with async_save, sync otherwise
    staged_in_shared_memory: bool = False  # DefaultStager with staging_shared_memory
    train_bytes: int = 0  # the training step's matrices


@dataclass(frozen=True)
class MemoryEstimate:
    baseline_bytes: int  # interpreter, torch, DCP, backend client, process group (+ DTensor)
    shard_bytes: int  # the state the rank saves, then the template it loads into (one at a time)
    staging_bytes: int  # async save: DCP's copy of the shard
    save_buffer_bytes: int  # what the backend holds while writing
    load_buffer_bytes: int  # what the backend holds while reading
    metadata_bytes: int = 0  # the .metadata every rank reads on load
    deep_copy_bytes: int = 0  # async save of DTensors: what DCP's deep copies leave behind
    slack_bytes: int = 0  # free heap glibc keeps below its trim threshold
    checkpointer_bytes: int = 0  # save_mode process: the second process per rank
    train_bytes: int = 0  # the training step's matrices
    transformers: bool = False  # the baseline holds transformers and a meta build

    @property
    def _always_bytes(self) -> int:
        extra = self.checkpointer_bytes + self.train_bytes
        return self.baseline_bytes + self.slack_bytes + self.shard_bytes + extra

    @property
    def save_peak_bytes(self) -> int:
        held = self.staging_bytes + self.deep_copy_bytes + self.save_buffer_bytes
        return self._always_bytes + held

    @property
    def load_peak_bytes(self) -> int:
        held = self.load_buffer_bytes + self.metadata_bytes
        return self._always_bytes + held

    @property
    def peak_bytes(self) -> int:
        return max(self.save_peak_bytes, self.load_peak_bytes)

    def breakdown(self) -> str:
        save = []
        if self.staging_bytes:
            save.append(f"async staging copy {format_bytes(self.staging_bytes)}")
        if self.deep_copy_bytes:
            save.append(f"DTensor deep copies {format_bytes(self.deep_copy_bytes)}")
        save.append(f"write buffers {format_bytes(self.save_buffer_bytes)}")
        load = [f"read buffers {format_bytes(self.load_buffer_bytes)}"]
        if self.metadata_bytes:
            load.append(f".metadata {format_bytes(self.metadata_bytes)}")
        beside = ""
        if self.checkpointer_bytes:
            beside += f" + checkpointer process {format_bytes(self.checkpointer_bytes)}"
        if self.train_bytes:
            beside += f" + training step (or its loader) {format_bytes(self.train_bytes)}"
        return (
            f"shard or load template {format_bytes(self.shard_bytes)} + the larger of saving "
            f"({' + '.join(save)}) and loading ({' + '.join(load)}) + allocator slack "
            f"{format_bytes(self.slack_bytes)} + baseline {format_bytes(self.baseline_bytes)} "
            f"(interpreter, torch, storage client{', transformers' if self.transformers else ''})"
            f"{beside}"
        )


# The settings :func:`rank_load` reads (tests/test_memory_plan.py records what it reads and fails
# when this drifts): ``ckptbench sizes`` takes each as an option, from its declaration.
READS: tuple[str, ...] = (
    "backend",
    "world_size",
    "layer_size",
    "padding_size",
    "model",
    "layers",
    "vocab",
    "optimizer",
    "dtype",
    "load_world_size",
    "strategy",
    "format",
    "async_save",
    "save_mode",
    "stager",
    "staging_shared_memory",
    "train_every",
    "train_matrix",
    "data_loading",
    "train_step_ms",
    "threads",
    "part_size_bytes",
)


def rank_load(config: BenchmarkSettings) -> RankLoad:
    """What rank 0 (the largest rank under either layout's dealing) holds, from its config."""
    sized, spec = config.model_sizes(), config.model_spec
    if sized is not None and spec is not None:
        largest, item = sized.largest_rank_bytes, sized.largest_item_bytes
        tensors = model_tensor_sizes(spec, config.world_size)
        if config.load_world_size is not None:
            # A resharding load gives each of fewer ranks more rows, each of more ranks fewer;
            # rank 0 both saves and loads, so it is planned for the larger of the two.
            loaded = models.model_sizes(spec, config.load_world_size)
            largest = max(largest, loaded.largest_rank_bytes)
            item = max(item, loaded.largest_item_bytes)
        metadata = sized.metadata_bytes
    else:
        held = len(sizes.owned_indices(0, config.world_size, config.padding_size))
        if config.strategy is not Strategy.SHARDED or config.single_object:
            # full (and torch-save, its save on any strategy): rank 0 holds the whole state
            # once gathered and once loaded; replicated: every rank holds it.
            held = config.padding_size
        item = sizes.tensor_bytes(config.layer_size)
        largest = held * item
        tensors = [item] * held
        metadata = 0
    return RankLoad(
        backend=config.backend,
        shard_bytes=largest,
        largest_item_bytes=item,
        async_save=config.async_save,
        save_mode=config.saving,
        # Only DCP's DefaultStager stages into shared memory (the option needs it).
        staged_in_shared_memory=config.stager is Stager.DEFAULT and config.staging_shared_memory,
        train_bytes=train_bytes(config),
        metadata_bytes=metadata,
        model=spec is not None,
        transformers=spec is not None and spec.preset not in models.PRESETS,
        copied_bytes=copied_bytes(tensors),
        heap_bytes=heap_bytes(tensors),
        heap_item_bytes=largest_heap_item(tensors),
        threads=config.threads,
        part_size_bytes=config.part_size_bytes,
    )


def train_bytes(config: BenchmarkSettings) -> int:
    """The training step's matrices: a, b and out, (N, N) float32 each. A step-time target's N
    is found on the node; the largest N it may choose is counted. A step that reads from the
    loader (data_loading) builds no matrices: it holds one accelerator's loader instead."""
    if config.train_every is None:
        return 0
    if config.data_loading is not None:
        return data_memory.loader_bytes(config.data_loading)
    side = config.train_matrix if config.train_step_ms is None else TRAIN_TARGET_MATRIX_MAX
    return TRAIN_MATRICES * side * side * sizes.FLOAT32_BYTES


def saving_mode(load: RankLoad) -> SaveMode:
    if load.save_mode is not None:
        return load.save_mode
    return SaveMode.THREAD if load.async_save else SaveMode.SYNC


def checkpointer_bytes(load: RankLoad) -> int:
    """DCP's process checkpointer: a second interpreter with torch, DCP, the storage client and
    gloo, plus the backend's write buffers; the staged shard it writes is shared memory already
    counted in the rank's staging copy."""
    if saving_mode(load) is not SaveMode.PROCESS:
        return 0
    return BASELINE_BYTES[load.backend] + save_buffer_bytes(load)


def copied_bytes(tensor_sizes: list[int]) -> int:
    """Payload the gcs writer copies into part buffers: tensors below the zero-copy size."""
    return sum(n for n in tensor_sizes if n < ZERO_COPY_MIN_BYTES)


def heap_bytes(tensor_sizes: list[int]) -> int:
    """Payload in tensors small enough for glibc to place in the heap."""
    return sum(n for n in tensor_sizes if n < HEAP_BLOCK_MAX_BYTES)


def slack_bytes(load: RankLoad) -> int:
    """Freed item buffers glibc keeps below its trim threshold (file and gcsfs: DCP's reader)."""
    if load.backend is Backend.GCS:
        return 0
    return TRIM_THRESHOLD_BLOCKS * load.heap_item_bytes


def largest_heap_item(tensor_sizes: list[int]) -> int:
    return max((n for n in tensor_sizes if n < HEAP_BLOCK_MAX_BYTES), default=0)


def deep_copy_bytes(load: RankLoad) -> int:
    """What staging DTensors leaves besides the copy: DCP deep-copies each CPU DTensor, data
    included, before it swaps in a fresh local tensor. Copies too big for the heap are unmapped
    when freed; those from the heap stay resident (measured: 200 MiB of 4 MiB DTensors staged
    with collection off held 434 MiB, of 64 MiB ones 258 MiB)."""
    if not (saving_mode(load).is_async and load.model):
        return 0
    return load.heap_bytes


def model_tensor_sizes(spec: models.ModelSpec, world_size: int, rank: int = 0) -> list[int]:
    """The bytes of each tensor rank ``rank`` holds of a model preset."""
    out = []
    for t in models.state_tensors(spec):
        shape = models.local_shape(t, world_size, rank)
        n = t.itemsize
        for d in shape:
            n *= d
        out.append(n)
    return out


# s3 and s3fs, fitted to the peaks of 2-rank runs on the embedded S3 server (2026-11-25; shards
# of 152 MiB in 38 MiB and 19 MiB items, 305 MiB in 76 MiB items): s3 peaked 2.9 to 3.1 shards
# above its baseline (846, 776 and 1286 MiB): s3torchconnector's DCP-optimised reader coalesces a
# file's planned ranges into one buffer, the shard's bytes, and torch.load makes tensors of it
# before they are copied into the template: two shards and more besides the template (2.4
# counted, the largest seen). s3fs peaked 2.4 shards above its baseline (724 MiB at 152 MiB):
# fsspec's read-ahead cache and the item's bytes.
S3_READ_SHARDS = 2.4
S3FS_READ_SHARDS = 1.5


def save_buffer_bytes(load: RankLoad) -> int:
    if load.backend is Backend.GCS:
        # Small tensors are gathered into part buffers; at most threads + 1 parts are in flight.
        return min(load.copied_bytes, (load.threads + 1) * load.part_size_bytes)
    if load.backend in (Backend.GCSFS, Backend.S3FS):
        return GCSFS_WRITE_COPIES * load.largest_item_bytes
    if load.backend is Backend.DATAFLUX:
        # The connector buffers each file (each torch-save object) whole until its stream
        # closes: the rank's files together hold its whole shard.
        return load.shard_bytes
    return 0


def load_buffer_bytes(load: RankLoad) -> int:
    if load.backend is Backend.GCS:
        return load.threads * SLICES_PER_THREAD * READ_SLICE_BYTES
    if load.backend is Backend.S3:
        return int(S3_READ_SHARDS * load.shard_bytes)
    if load.backend is Backend.S3FS:
        return int(S3FS_READ_SHARDS * load.shard_bytes)
    if load.backend is Backend.DATAFLUX:
        # Each file is downloaded whole before DCP reads an item of it (a torch-save object, the
        # whole state): up to a shard, counted whole, besides DCP's copies of an item.
        return load.shard_bytes + READ_COPIES * load.largest_item_bytes
    return READ_COPIES * load.largest_item_bytes


def staging_bytes(load: RankLoad) -> int:
    """An async save's staging copy of the shard; with the process checkpointer and a copy not
    staged into shared memory, each tensor is moved there as it is sent: one more item."""
    mode = saving_mode(load)
    if not mode.is_async:
        return 0
    if mode is SaveMode.PROCESS and not load.staged_in_shared_memory:
        return load.shard_bytes + load.largest_item_bytes
    return load.shard_bytes


def estimate(load: RankLoad) -> MemoryEstimate:
    baseline = BASELINE_BYTES[load.backend] + (MODEL_RUNTIME_BYTES if load.model else 0)
    baseline += TRANSFORMERS_BYTES if load.transformers else 0
    return MemoryEstimate(
        baseline_bytes=baseline,
        shard_bytes=load.shard_bytes,
        staging_bytes=staging_bytes(load),
        checkpointer_bytes=checkpointer_bytes(load),
        train_bytes=load.train_bytes,
        deep_copy_bytes=deep_copy_bytes(load),
        slack_bytes=slack_bytes(load),
        save_buffer_bytes=save_buffer_bytes(load),
        load_buffer_bytes=load_buffer_bytes(load),
        metadata_bytes=load.metadata_bytes,
        transformers=load.transformers,
    )


class MemoryRefused(RuntimeError):
    """The run cannot fit; the message gives the numbers and the way out."""


def refusal(
    est: MemoryEstimate, budget_bytes: int, budget_source: str, way_out: str, force: str
) -> str | None:
    """Why the run does not fit in ``budget_bytes``, or None when it does."""
    if est.peak_bytes <= budget_bytes:
        return None
    return (
        f"a rank needs about {format_bytes(est.peak_bytes)} ({est.breakdown()}) but has "
        f"{format_bytes(budget_bytes)} ({budget_source}); {way_out}, or force the run with "
        f"{force} (it will likely be killed for lack of memory)"
    )


def parse_quantity(text: str) -> int:
    """A Kubernetes memory quantity (``64Gi``, ``500M``, ``1e9``, ``128974848``) in bytes."""
    try:
        return int(quantity(text))
    except ValueError:
        raise ValueError(f"not a memory quantity: {text!r}") from None
