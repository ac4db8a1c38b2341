"""MLPerf Storage v3.0's rules for a checkpointing run: its CLOSED/OPEN category and 3 x RAM.

Pure: computed from the settings a run recorded (``BenchmarkSettings.record``) and, for the
3 x RAM rule, from what the ranks reported. docs/measurement.md says what each verdict means.

- **CLOSED / OPEN**: under CLOSED only the checkpoint folder may change. A run is CLOSED when it
  runs the ``mlperf`` procedure on one of MLPerf's four models as MLPerf sizes it (the ``mlperf``
  dtype profile, AdamW, no layer or vocabulary override), on MLPerf's process count (or its
  8-process subset), and every other setting that changes what is timed is at its default. The
  checkpoint folder, the storage it is on (backend, project) and settings that change nothing
  timed (timeouts, verification, the seed) may differ. Anything else makes it OPEN, and each
  reason is named.
- **3 x RAM** (``file`` backend): the data a client (node) writes must exceed three times its RAM,
  or its page cache must be cleared, so that reads come from storage: ``met by size``, ``met by
  eviction`` (ckptbench evicts the written files before each load) or ``not met``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from ckptbench.workload.contract.checkpoint import models
from ckptbench.workload.contract.choices import CacheMode, Procedure, SaveMode
from ckptbench.workload.contract.results.records import RankRecord
from ckptbench.workload.contract.settings import declared

SUBSET_PROCESSES = 8  # MLPerf's CLOSED subset: 8 processes of any model
RAM_MULTIPLE = 3

# May differ under CLOSED: the checkpoint folder and the storage it is on, what MLPerf fixes
# itself (checked below), and settings that change nothing timed.
_FREE = {
    "checkpoint_path", "backend", "project", "procedure", "model", "dtype", "optimizer",
    "layers", "vocab", "world_size", "sample_count", "warmup_samples", "seed", "verify",
    "keep_checkpoints", "memory_check", "rendezvous_timeout_seconds", "stall_seconds",
    "request_deadline_seconds",
}  # fmt: skip


class Category(NamedTuple):
    label: Literal["CLOSED", "OPEN"]
    reasons: list[str]  # why OPEN; empty when CLOSED


def category(settings: Mapping[str, Any]) -> Category | None:
    """The run's MLPerf Storage category from its recorded settings; None outside ``mlperf``."""
    if settings.get("procedure") != Procedure.MLPERF.value:
        return None
    reasons: list[str] = []
    model = settings.get("model")
    known = models.MLPERF_V3.get(str(model)) if model else None
    if known is None:
        reasons.append(
            f"model is {model or 'none (the reference layout)'}, not one of MLPerf Storage "
            f"v3.0's ({', '.join(models.MLPERF_V3)})"
        )
    else:
        allowed = (SUBSET_PROCESSES, known.processes)
        if settings.get("world_size") not in allowed:
            subset = (
                f" (or the {SUBSET_PROCESSES}-process subset)"
                if known.processes != SUBSET_PROCESSES
                else ""
            )
            reasons.append(
                f"world_size is {settings.get('world_size')}, not {known.processes}{subset}"
            )
    fixed = {
        "dtype": models.DtypeProfile.MLPERF.value,
        "optimizer": models.Optimizer.ADAMW.value,
        "layers": None,
        "vocab": None,
    }
    for name, want in fixed.items():
        if name in settings and settings[name] != want:
            reasons.append(f"{name} is {_shown(settings[name])}, not {_shown(want)}")
    defaults = _defaults()
    for name, value in settings.items():
        if name in _FREE or name not in defaults:
            continue
        if value != defaults[name]:
            reasons.append(f"{name} is {_shown(value)}, not its default {_shown(defaults[name])}")
    return Category("OPEN" if reasons else "CLOSED", reasons)


def _defaults() -> dict[str, Any]:
    """Each declared setting's default, as a recorded setting reads (enums as their values)."""
    out: dict[str, Any] = {}
    for d in declared():
        default = d.field.default
        out[d.name] = default.value if isinstance(default, enum.Enum) else default
    # Recorded as it ran: an unset save_mode is recorded resolved (asyncSave's default: sync).
    out["save_mode"] = SaveMode.SYNC.value
    return out


def _shown(value: Any) -> str:
    return (
        "unset" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


Verdict = Literal["met by size", "met by eviction", "not met"]


class RamRule(NamedTuple):
    verdict: Verdict
    written_bytes: int  # by the node that wrote the least relative to its RAM
    memory_bytes: int  # that node's RAM


def ram_rule(records: Sequence[RankRecord], cache: CacheMode | None) -> RamRule | None:
    """MLPerf's 3 x RAM rule for the ``file`` backend (``cache`` set), per node: the data its
    ranks wrote over the timed saves against three times its RAM. None when not measurable."""
    if cache is None:
        return None
    written: dict[str, int] = {}
    memory: dict[str, int] = {}
    for r in records:
        node_memory = r.resources.node_memory_bytes if r.resources else None
        if r.save is None or not node_memory:
            continue
        written[r.host] = written.get(r.host, 0) + r.bytes * r.save.timing.stats.n
        memory[r.host] = node_memory
    if not written:
        return None
    worst = min(written, key=lambda host: written[host] / memory[host])
    if written[worst] > RAM_MULTIPLE * memory[worst]:
        verdict: Verdict = "met by size"
    elif cache is CacheMode.DROPPED:
        verdict = "met by eviction"
    else:
        verdict = "not met"
    return RamRule(verdict, written[worst], memory[worst])
