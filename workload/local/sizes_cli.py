"""``ckptbench sizes``: what a model's checkpoint holds per rank and in all, before any run.

Pure arithmetic from ``contract/checkpoint/models.py`` (no torch imported, instant at any scale):
``ckptbench sizes --model llama3-70b --world-size 64``. The memory a rank needs is the run's own
plan (``memory_plan``), for every setting it reads, taken as ``ckptbench run`` takes it
(``--save-mode process --stager default ...``). ``--table`` prints the Markdown table that
``docs/models.md`` carries (a test regenerates it and fails on drift).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from ckptbench.workload.contract import cells, settings
from ckptbench.workload.contract.checkpoint import hf_shapes, memory_plan, models
from ckptbench.workload.contract.checkpoint.sizes import GIB, format_bytes
from ckptbench.workload.contract.choices import Backend, Stager
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.local import options
from ckptbench.workload.local.options import UsageError, explain, values_of

TABLE_WORLD_SIZES = (8, 64, 512)
# Reports, not runs: each is arithmetic, so more than a sweep's cells, but a typo in a list
# still should not print thousands.
MAX_REPORTS = 1024
TABLE_PRESETS = ("llama3-8b", "llama3-70b", "mlperf-llama3-70b", "llama3-405b")


# Settings whose default here differs from ``ckptbench run``'s: sizes is about a model preset,
# sized at 8 ranks unless told otherwise.
SIZES_DEFAULTS: dict[str, object] = {"model": models.Preset("llama3-8b"), "world_size": 8}


def plan_options() -> tuple[options.Option, ...]:
    """Every setting the memory plan reads (``memory_plan.READS``), as ``ckptbench run`` takes
    it: flag, help, parser and comma list from its declaration. The reference layout's are left
    out: sizes computes a model preset's checkpoint."""
    return tuple(
        options.from_setting(d, SIZES_DEFAULTS[d.name])
        if d.name in SIZES_DEFAULTS
        else options.from_setting(d)
        for d in settings.declared()
        if d.name in memory_plan.READS
        and d.setting.layout != "reference"
        and not d.setting.options_prefix  # the loader's group: not a checkpoint's size
    )


def _parser(plan: Sequence[options.Option]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ckptbench sizes",
        allow_abbrev=False,
        description="Per-rank and total checkpoint sizes of a model preset, and the memory a rank "
        "needs, computed, not run. An option shown with [,...] takes a comma list: one report "
        f"per combination (at most {MAX_REPORTS}).",
    )
    options.add_options(p, plan)
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


# The memory plan reads no path, but a rank's config needs one of the backend's shape.
_NO_PATH = {
    "": "/ckptbench-sizes",
    "gs://": "gs://ckptbench-sizes",
    "s3://": "s3://ckptbench-sizes",
}


def configs(plan: Sequence[options.Option], args: argparse.Namespace) -> list[WorkloadConfig]:
    """Rank 0's config for each combination of the options' values, validated as a run's are."""
    axes: list[cells.Axis] = []
    for o in plan:
        raw = getattr(args, o.dest)
        values = ([("", o.const)] if raw else []) if o.is_switch else values_of(o, raw)
        # An option not given and without a default takes the declaration's own (no axis).
        if values and o.field is not None:
            texts = tuple(t for t, _ in values)
            axes.append(cells.Axis(o.field, o.flag, tuple(v for _, v in values), texts))
    try:
        combos = cells.cross(axes, MAX_REPORTS, "one ckptbench sizes")
    except cells.CellCountError as exc:
        raise UsageError(str(exc)) from None
    out = []
    for combo in combos:
        given: dict[str, Any] = {k: v for k, v in combo.items() if v is not None}
        if args.mlperf:
            given["world_size"] = models.MLPERF_V3[given["model"]].processes
            given["dtype"] = models.DtypeProfile.MLPERF
        backend = Backend(given.get("backend", Backend.GCS))
        try:
            out.append(WorkloadConfig(rank=0, checkpoint_path=_NO_PATH[backend.scheme], **given))
        except ValidationError as exc:
            raise UsageError(explain(exc)) from None
    return out


def build_parser() -> argparse.ArgumentParser:
    return _parser(plan_options())


def main(argv: Sequence[str]) -> int:
    plan = plan_options()
    parser = _parser(plan)
    args = parser.parse_args(list(argv))
    if args.table:
        print(markdown_table())
        return 0
    if args.mlperf:
        args.model = args.model or str(SIZES_DEFAULTS["model"])
        # --model takes a comma list, as its help says, with --mlperf too: each is checked.
        for model in (m.strip() for m in str(args.model).split(",")):
            if model not in models.MLPERF_V3:
                parser.error(
                    f"--mlperf: {model} is none of MLPerf Storage v3.0's checkpointing models "
                    f"({', '.join(models.MLPERF_V3)})"
                )
    try:
        cells = configs(plan, args)
        reports = [_sized(c) for c in cells]
    except UsageError as exc:
        print(f"ckptbench sizes: {exc}", file=sys.stderr)
        return 2
    except models.ModelError as exc:
        field, _, reason = str(exc).partition(": ")
        option = options.OPTION_OF.get(field, f"--{field}")
        print(f"ckptbench sizes: {option}: {reason}", file=sys.stderr)
        return 2
    if args.json:
        out = [as_dict(s, c) for s, c in zip(reports, cells, strict=True)]
        if args.mlperf:  # each model of a comma list against its own published size
            for entry, report in zip(out, reports, strict=True):
                entry["mlperf_v3"] = mlperf_v3(report)
        print(json.dumps(out, indent=1))
    else:
        texts = [describe(s, c) for s, c in zip(reports, cells, strict=True)]
        if args.mlperf:
            for i, report in enumerate(reports):
                v3 = mlperf_v3(report)
                texts[i] += (
                    f"\nMLPerf Storage v3.0: {v3['processes']} processes, published "
                    f"{v3['published_gib']:,.1f} GiB; this checkpoint "
                    f"{v3['computed_gib']:,.1f} GiB ({v3['computed_over_published']:.4f}x)"
                )
        print("\n\n".join(texts))
    return 0


def _sized(config: WorkloadConfig) -> models.ModelSizes:
    sized = config.model_sizes()
    if sized is None:  # --model has a default here; an empty one is refused by its parser
        raise UsageError("--model: sizes needs a model preset")
    return sized


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


def as_dict(s: models.ModelSizes, config: WorkloadConfig) -> dict[str, object]:
    mem = config.memory_estimate()
    layers, vocab = models.dimensions(s.spec)
    shipped = hf_shapes.SHIPPED.get(s.spec.preset)
    return {
        "model": s.spec.preset,
        "layers": layers,
        "vocab": vocab,
        "optimizer": s.spec.optimizer.value,
        "dtype": s.spec.dtype.value,
        "world_size": s.world_size,
        "parameters": s.parameters,
        # The count published for a shipped config, unscaled: the sizes are checked against it.
        "published_parameters": shipped and shipped.published_params,
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
        "memory_backend": config.backend.value,
        # What the estimate was made for: every setting it reads that acts here.
        "memory_settings": {k: v for k, v in config.record().items() if k in memory_plan.READS},
        "memory_peak_bytes_estimate": mem.peak_bytes,
        "memory_staging_bytes_estimate": mem.staging_bytes,
        "memory_checkpointer_bytes_estimate": mem.checkpointer_bytes,
        "memory_train_bytes_estimate": mem.train_bytes,
    }


def describe(s: models.ModelSizes, config: WorkloadConfig) -> str:
    mem = config.memory_estimate()
    rows = [
        ("model", s.spec.describe()),
        ("world size", f"{s.world_size} ranks, Shard(0) by torch.chunk"),
        ("parameters", f"{s.parameters:,} in {s.parameter_tensors} tensors"),
        *_published_rows(s),
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
            f"about {format_bytes(mem.peak_bytes)} on {config.backend.value}: {mem.breakdown()}",
        ),
        *_saving_rows(config, mem),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _published_rows(s: models.ModelSizes) -> list[tuple[str, str]]:
    """A shipped config's published parameter count beside ours (unscaled runs only)."""
    shipped = hf_shapes.SHIPPED.get(s.spec.preset)
    if shipped is None or s.spec.layers is not None or s.spec.vocab is not None:
        return []
    ratio = s.parameters / shipped.published_params
    return [("published", f"{shipped.published_params:,.0f} ({shipped.source}); ours {ratio:.4f}x")]


def _saving_rows(config: WorkloadConfig, mem: memory_plan.MemoryEstimate) -> list[tuple[str, str]]:
    """The save mode's share of the estimate: the staging copy and the checkpointer process."""
    mode = config.saving
    stager = f", stager {config.stager.value}" if mode.is_async else ""
    if config.stager is Stager.DEFAULT and config.staging_shared_memory and mode.is_async:
        stager += " into shared memory"
    staging = (
        f"{format_bytes(mem.staging_bytes)} while a save is staged or uploading"
        if mem.staging_bytes
        else "none (a sync save writes from the state itself)"
    )
    checkpointer = (
        f"{format_bytes(mem.checkpointer_bytes)} more, a second process per rank (its own "
        "interpreter, torch, storage client and write buffers)"
        if mem.checkpointer_bytes
        else "none (the upload runs in the rank's process)"
    )
    rows = [
        ("save mode", f"{mode.value}{stager}"),
        ("staging copy", staging),
        ("checkpointer", checkpointer),
    ]
    if mem.train_bytes:
        rows.append(("training step", f"{format_bytes(mem.train_bytes)} (three matrices)"))
    return rows


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
