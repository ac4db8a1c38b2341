"""The options of ``ckptbench run``: one table, from which the parser, the sweep axes and the error
messages are all derived.

To add an option, add one :class:`Option` to :data:`OPTIONS`. An option with ``field`` sets that
:class:`WorkloadConfig` field; an option that takes a value takes a comma list too (unless
``sweep=False``), and the run then has one cell per value (the cross product over all such
options). Values are parsed in :mod:`plan`, not by argparse, so that a bad value is reported as
``--option: reason`` like the configuration's own checks.
"""

from __future__ import annotations

import argparse
import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from ckptbench.workload.contract import models
from ckptbench.workload.contract.config import (
    Backend,
    GarbageCollection,
    Procedure,
    UploadScheme,
    field_errors,
)

DEFAULT_TIMEOUT_SECONDS = 3600.0

_E = TypeVar("_E", bound=enum.Enum)


class UsageError(ValueError):
    """A bad option; the message names it."""


@dataclass(frozen=True)
class Option:
    """One option of ``ckptbench run``."""

    flag: str
    help: str
    field: str | None = None  # the WorkloadConfig field it sets; None: read by the runner itself
    parse: Callable[[str], Any] | None = None  # parses one value; None: a switch
    default: Any = None  # the parsed default of a value option (None: decided by the plan)
    metavar: str = "N"
    sweep: bool = True  # a value option takes a comma list, one cell per value
    const: Any = True  # the value a switch gives its field when present
    answers_for: tuple[str, ...] = ()  # config fields it sets indirectly, for error messages

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def name(self) -> str:
        return self.flag.removeprefix("--")

    @property
    def is_switch(self) -> bool:
        return self.parse is None

    @property
    def is_axis(self) -> bool:
        """Whether it may take a comma list: a value option that sets a config field."""
        return self.sweep and not self.is_switch and self.field is not None


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str) -> int:
    """``32MiB``, ``32M``, ``512KiB``, ``1GiB`` (all 1024-based) or a bare number of bytes."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"not a size: {text!r} (use e.g. 32MiB, 512KiB, 1GiB or a number of bytes)"
        )
    unit = (m.group(2) or "").upper()[:1]
    value = float(m.group(1)) * _UNITS[unit if unit != "B" else ""]
    if value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number of bytes: {text!r}")
    return int(value)


def _one_of(kind: type[_E], what: str) -> Callable[[str], _E]:
    """A parser of a member of ``kind`` by its value, any case; a bad one names the valid ones."""

    def parse(text: str) -> _E:
        try:
            return kind(text.lower())
        except ValueError:
            valid = ", ".join(str(member.value) for member in kind)
            raise argparse.ArgumentTypeError(
                f"unknown {what} {text!r} (choose from {valid})"
            ) from None

    return parse


parse_backend = _one_of(Backend, "backend")
parse_optimizer = _one_of(models.Optimizer, "optimizer")
parse_dtype = _one_of(models.DtypeProfile, "dtype profile")
parse_procedure = _one_of(Procedure, "procedure")
parse_gc = _one_of(GarbageCollection, "garbage collection")
parse_upload_scheme = _one_of(UploadScheme, "upload scheme")


def parse_model(text: str) -> str:
    if text not in models.PRESETS:
        raise argparse.ArgumentTypeError(
            f"unknown preset {text!r} (choose from {', '.join(models.PRESETS)})"
        )
    return text


def parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


OPTIONS: tuple[Option, ...] = (
    Option("--world-size", "number of ranks (default 2)", "world_size", parse_int, 2),
    Option(
        "--storage",
        "file:///path, a plain path, or gs://bucket/prefix (default: embedded emulator)",
        parse=str,
        metavar="URL",
        sweep=False,
        answers_for=("checkpoint_path",),
    ),
    Option(
        "--backend",
        "file, gcs or gcsfs (default gcs; file for local storage)",
        "backend",
        parse_backend,
        metavar="NAME",
    ),
    Option(
        "--emulator",
        "with a gs:// --storage: create its bucket on an embedded emulator instead of GCS",
    ),
    Option(
        "--layer-size",
        "rows of each (layer_size, 1000) float32 tensor (default 10000: 40 MB a tensor)",
        "layer_size",
        parse_int,
        10_000,
        metavar="ROWS",
    ),
    Option("--padding-size", "number of tensors (default 8)", "padding_size", parse_int, 8),
    Option(
        "--model",
        "a model preset instead of the reference layout: "
        + ", ".join(models.PRESETS)
        + " (sharded as FSDP2 does; see docs/models.md)",
        "model",
        parse_model,
        metavar="PRESET",
    ),
    Option("--layers", "model: override the number of layers", "layers", parse_int),
    Option("--vocab", "model: override the vocabulary size", "vocab", parse_int),
    Option(
        "--optimizer",
        "model: optimizer state saved, adamw (default) or none",
        "optimizer",
        parse_optimizer,
        metavar="NAME",
    ),
    Option(
        "--dtype",
        "model: dtype profile, fp32 (default, 12 B/param), mlperf (14 B/param) or bf16",
        "dtype",
        parse_dtype,
        metavar="PROFILE",
    ),
    Option(
        "--load-world-size",
        "model: load on the first M ranks only, resharding the checkpoint (M <= --world-size)",
        "load_world_size",
        parse_int,
        metavar="M",
    ),
    Option(
        "--force",
        "run even when the memory estimate exceeds the memory available to the ranks",
        "memory_check",
        const=False,
    ),
    # Their defaults depend on the procedure: decided by the plan (see plan.procedure_defaults).
    Option(
        "--samples",
        "timed samples (default 3; 10 with --procedure mlperf)",
        "sample_count",
        parse_int,
    ),
    Option(
        "--warmup",
        "untimed samples first (default 1; 0 with --procedure reference or mlperf)",
        "warmup_samples",
        parse_int,
    ),
    Option(
        "--procedure",
        "ckptbench (warm-up, save/load interleaved; default), reference (all saves then all "
        "loads into one template, no warm-up) or mlperf (10 writes then 10 reads)",
        "procedure",
        parse_procedure,
        metavar="NAME",
    ),
    Option(
        "--keep-cache",
        "file backend: do not evict written files from the page cache before each load "
        "(loads may then read memory, not the disk)",
        "drop_cache",
        const=False,
    ),
    Option("--threads", "transfer threads per rank (gcs; default 8)", "threads", parse_int, 8),
    Option(
        "--part-size",
        "upload/download part size (gcs), e.g. 32MiB (default)",
        "part_size_bytes",
        parse_size,
        32 * 1024**2,
        metavar="SIZE",
    ),
    Option(
        "--upload-scheme",
        "gcs: multipart (GCS's XML multipart upload), compose (a parallel composite upload) or "
        "auto (default: multipart on GCS, compose against an emulator)",
        "upload_scheme",
        parse_upload_scheme,
        metavar="SCHEME",
    ),
    Option("--async-save", "save with dcp.async_save", "async_save"),
    Option(
        "--sync-files",
        "gcsfs: let DCP os.sync() the node after each file, as before ckptbench ran gcsfs the "
        "way the reference does (a handicapped baseline, for comparison)",
        "sync_files",
    ),
    Option("--no-verify", "skip verifying loaded tensors", "verify", const=False),
    Option("--keep", "keep the checkpoint objects", "keep_checkpoints"),
    Option("--seed", "seed of the synthetic tensor content (default 0)", "seed", parse_int, 0),
    Option(
        "--gc",
        "manual (default: automatic garbage collection off, a collection before each timed "
        "operation, untimed, as torchtitan trains) or automatic (Python's default)",
        "garbage_collection",
        parse_gc,
        metavar="MODE",
    ),
    Option(
        "--project",
        "GCP project for the storage clients",
        "project",
        str,
        metavar="ID",
        sweep=False,
    ),
    Option(
        "--rendezvous-timeout",
        "seconds the ranks wait for rank 0 (default 60)",
        "rendezvous_timeout_seconds",
        parse_float,
        60.0,
        metavar="SECONDS",
    ),
    Option(
        "--timeout",
        "seconds one cell's run may take before its ranks are stopped (default 3600)",
        parse=parse_float,
        default=DEFAULT_TIMEOUT_SECONDS,
        metavar="SECONDS",
        sweep=False,
        answers_for=("collective_timeout_seconds",),
    ),
    Option(
        "--json",
        "write every cell's summary as JSON here (read by 'ckptbench compare' and 'report')",
        parse=str,
        metavar="FILE",
        sweep=False,
    ),
    Option(
        "--csv",
        "write a row per cell here: settings, figures, MLPerf Storage's column names",
        parse=str,
        metavar="FILE",
        sweep=False,
    ),
)

# WorkloadConfig field -> the option that sets it, so a validation error names what the user typed.
OPTION_OF: dict[str, str] = {
    **{o.field: o.flag for o in OPTIONS if o.field},
    **{f: o.flag for o in OPTIONS for f in o.answers_for},
}


def option(flag: str) -> Option:
    for o in OPTIONS:
        if o.flag == flag:
            return o
    raise KeyError(flag)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ckptbench run",
        description=(
            "Benchmark torch.distributed.checkpoint save/load with N local ranks. With no "
            "--storage, an embedded GCS emulator is started and stopped. Options marked LIST "
            "take a comma list; the run then measures every combination (one cell each) in turn."
        ),
    )
    for o in OPTIONS:
        if o.is_switch:
            p.add_argument(o.flag, dest=o.dest, action="store_true", help=o.help)
        elif o.is_axis:
            # Kept as text: the plan splits and parses it, naming the option on a bad value.
            p.add_argument(o.flag, dest=o.dest, metavar=f"{o.metavar}[,...]", help=o.help)
        else:
            p.add_argument(o.flag, dest=o.dest, metavar=o.metavar, help=o.help)
    return p


def values_of(o: Option, raw: str | None) -> list[tuple[str, Any]]:
    """An option's values as (text typed, parsed value); its default when not given."""
    assert o.parse is not None, o.flag
    if raw is None:
        return [] if o.default is None else [(str(o.default), o.default)]
    texts = [t.strip() for t in raw.split(",")] if o.is_axis else [raw]
    if o.is_axis and not all(texts):
        raise UsageError(f"{o.flag}: empty value in list {raw!r}")
    out: list[tuple[str, Any]] = []
    for text in texts:
        try:
            value = o.parse(text)
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise UsageError(f"{o.flag}: {exc}") from None
        if any(value == seen for _, seen in out):
            raise UsageError(f"{o.flag}: {text!r} is listed twice")
        out.append((text, value))
    return out


def explain(exc: ValidationError, where: Sequence[str] = ()) -> str:
    """Name the option behind each validation error, not the model's field."""
    lines = []
    for problem in field_errors(exc):
        flag = OPTION_OF.get(problem.field, problem.field or "options")
        got = f" (got {problem.value!r})" if problem.has_value else ""
        lines.append(f"{flag}: {problem.reason}{got}")
    text = "; ".join(lines)
    return f"{text} (in cell {' '.join(where)})" if where else text
