"""``ckptbench sizes``: what a model's checkpoint holds per rank and in all, before any run.

Pure arithmetic from ``contract/checkpoint/models.py`` (no torch imported, instant at any scale):
``ckptbench sizes --model llama3-70b --world-size 64``. ``--table`` prints the Markdown table that
``docs/models.md`` carries (a test regenerates it and fails on drift).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ckptbench.workload.contract.checkpoint import memory_plan, models
from ckptbench.workload.contract.checkpoint.sizes import GIB, format_bytes
from ckptbench.workload.contract.choices import Backend

TABLE_WORLD_SIZES = (8, 64, 512)
TABLE_PRESETS = ("llama3-8b", "llama3-70b", "mlperf-llama3-70b", "llama3-405b")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ckptbench sizes",
        description="Per-rank and total checkpoint sizes of a model preset, computed, not run.",
    )
    p.add_argument("--model", default="llama3-8b", choices=list(models.PRESETS))
    p.add_argument(
        "--world-size",
        default="8",
        metavar="N[,N...]",
        help="ranks (FSDP2 Shard(0)); a comma list for several",
    )
    p.add_argument("--layers", type=int, default=None, help="override the number of layers")
    p.add_argument("--vocab", type=int, default=None, help="override the vocabulary size")
    p.add_argument("--optimizer", default="adamw", choices=[o.value for o in models.Optimizer])
    p.add_argument("--dtype", default="fp32", choices=[d.value for d in models.DtypeProfile])
    p.add_argument("--async-save", action="store_true", help="count the async staging copy")
    p.add_argument(
        "--backend",
        default=Backend.GCS.value,
        choices=[b.value for b in Backend],
        help="the storage backend the memory estimate is for (default gcs, as 'ckptbench run')",
    )
    p.add_argument(
        "--mlperf",
        action="store_true",
        help="as MLPerf Storage v3.0 runs the model: its process count and the mlperf dtype "
        "profile, with MLPerf's published size beside (models: "
        + ", ".join(models.MLPERF_V3)
        + ")",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument(
        "--table", action="store_true", help="print the docs' Markdown table (N = 8, 64, 512)"
    )
    return p


def main(argv: Sequence[str]) -> int:
    parser = _parser()
    args = parser.parse_args(list(argv))
    if args.table:
        print(markdown_table())
        return 0
    try:
        worlds = [int(w) for w in str(args.world_size).split(",")]
    except ValueError:
        parser.error(f"--world-size: not a comma list of integers: {args.world_size!r}")
    if args.mlperf:
        if args.model not in models.MLPERF_V3:
            parser.error(
                f"--mlperf: {args.model} is none of MLPerf Storage v3.0's checkpointing models "
                f"({', '.join(models.MLPERF_V3)})"
            )
        worlds = [models.MLPERF_V3[args.model].processes]
        args.dtype = models.DtypeProfile.MLPERF.value
    spec = models.ModelSpec(
        args.model,
        args.layers,
        args.vocab,
        models.Optimizer(args.optimizer),
        models.DtypeProfile(args.dtype),
    )
    try:
        reports = [models.model_sizes(spec, n) for n in worlds]
    except models.ModelError as exc:
        field, _, reason = str(exc).partition(": ")
        option = "--world-size" if field == "world_size" else f"--{field}"
        print(f"ckptbench sizes: {option}: {reason}", file=sys.stderr)
        return 2
    backend = Backend(args.backend)
    if args.json:
        out = [as_dict(s, args.async_save, backend) for s in reports]
        if args.mlperf:
            out[0]["mlperf_v3"] = mlperf_v3(reports[0])
        print(json.dumps(out, indent=1))
    else:
        text = "\n\n".join(describe(s, args.async_save, backend) for s in reports)
        if args.mlperf:
            v3 = mlperf_v3(reports[0])
            text += (
                f"\nMLPerf Storage v3.0: {v3['processes']} processes, published "
                f"{v3['published_gib']:,.1f} GiB; this checkpoint {v3['computed_gib']:,.1f} GiB "
                f"({v3['computed_over_published']:.4f}x)"
            )
        print(text)
    return 0


def mlperf_v3(s: models.ModelSizes) -> dict[str, float | int]:
    """MLPerf Storage v3.0's process count and published size beside this checkpoint's."""
    published = models.MLPERF_V3[s.spec.preset]
    computed = s.total_bytes / GIB
    return {
        "processes": published.processes,
        "published_gib": published.published_gib,
        "computed_gib": round(computed, 1),
        "computed_over_published": round(computed / published.published_gib, 4),
    }


def memory_of(
    s: models.ModelSizes, async_save: bool, backend: Backend = Backend.GCS
) -> memory_plan.MemoryEstimate:
    """The memory plan of ``ckptbench run``'s defaults (8 threads, 32 MiB parts) on ``backend``."""
    tensors = memory_plan.model_tensor_sizes(s.spec, s.world_size)
    return memory_plan.estimate(
        memory_plan.RankLoad(
            backend=backend,
            shard_bytes=s.largest_rank_bytes,
            largest_item_bytes=s.largest_item_bytes,
            async_save=async_save,
            metadata_bytes=s.metadata_bytes,
            model=True,
            copied_bytes=memory_plan.copied_bytes(tensors),
            heap_bytes=memory_plan.heap_bytes(tensors),
            heap_item_bytes=memory_plan.largest_heap_item(tensors),
        )
    )


def as_dict(
    s: models.ModelSizes, async_save: bool, backend: Backend = Backend.GCS
) -> dict[str, object]:
    return {
        "model": s.spec.preset,
        "layers": s.spec.arch.n_layers,
        "vocab": s.spec.arch.vocab_size,
        "optimizer": s.spec.optimizer.value,
        "dtype": s.spec.dtype.value,
        "world_size": s.world_size,
        "parameters": s.parameters,
        "total_bytes": s.total_bytes,
        "largest_rank_bytes": s.largest_rank_bytes,
        "smallest_rank_bytes": s.smallest_rank_bytes,
        "tensors": s.tensors,
        "sharded_tensors": s.sharded_tensors,
        "pickled_items": s.byte_items,
        "rank_pickled_items": s.rank_byte_items,
        "items_per_rank": s.items_per_rank,
        "stored_items": s.stored_items,
        "empty_shards": s.empty_shards,
        "metadata_bytes_estimate": s.metadata_bytes,
        "memory_backend": backend.value,
        "memory_peak_bytes_estimate": memory_of(s, async_save, backend).peak_bytes,
    }


def describe(s: models.ModelSizes, async_save: bool, backend: Backend = Backend.GCS) -> str:
    mem = memory_of(s, async_save, backend)
    rows = [
        ("model", s.spec.describe()),
        ("world size", f"{s.world_size} ranks, Shard(0) by torch.chunk"),
        ("parameters", f"{s.parameters:,} in {s.parameter_tensors} tensors"),
        (
            "checkpoint",
            f"{format_bytes(s.total_bytes)} ({s.total_bytes:,} B, "
            f"{s.bytes_per_parameter:.2f} B/param)",
        ),
        (
            "per rank",
            f"{format_bytes(s.largest_rank_bytes)} largest (rank 0), "
            f"{format_bytes(s.smallest_rank_bytes)} smallest",
        ),
        (
            "tensors",
            f"{s.tensors} ({s.sharded_tensors} sharded, {s.replicated_tensors} replicated)"
            + (f", {s.empty_shards} empty shards" if s.empty_shards else ""),
        ),
        (
            "pickled items",
            f"{s.byte_items:,} on every rank (written once)"
            + (f" + {s.rank_byte_items} of its own" if s.rank_byte_items else ""),
        ),
        ("items per rank", f"{s.items_per_rank:,} planned"),
        ("stored items", f"{s.stored_items:,} (replicated items written once)"),
        (".metadata", f"about {format_bytes(s.metadata_bytes)} (estimate), read by every rank"),
        (
            "memory per rank",
            f"about {format_bytes(mem.peak_bytes)} on {backend.value}: {mem.breakdown()}",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def markdown_table() -> str:
    """Rank-0 GiB (fp32 / mlperf profiles), checkpoint GiB and `.metadata` for the presets."""
    head = "| preset | N | rank 0 GiB fp32 / mlperf | total GiB fp32 / mlperf | items a rank |"
    head += " .metadata MB (est.) |"
    lines = [head, "|---|---|---|---|---|---|"]
    for preset in TABLE_PRESETS:
        for n in TABLE_WORLD_SIZES:
            fp32 = models.model_sizes(models.ModelSpec(preset), n)
            mlperf = models.model_sizes(
                models.ModelSpec(preset, dtype=models.DtypeProfile.MLPERF), n
            )
            lines.append(
                f"| {preset} | {n} "
                f"| {fp32.largest_rank_bytes / GIB:.2f} / {mlperf.largest_rank_bytes / GIB:.2f} "
                f"| {fp32.total_bytes / GIB:.1f} / {mlperf.total_bytes / GIB:.1f} "
                f"| {fp32.items_per_rank:,} | {fp32.metadata_bytes / 1e6:.1f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
