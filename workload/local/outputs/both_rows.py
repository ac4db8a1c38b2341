"""The table's rows of both demands at once (``ckptbench run --data-loading``): each side alone
and together, and its slowdown with its 95% interval (docs/measurement.md, "Both demands at
once"), read from the summary's ``both``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ckptbench.workload.contract.results.summaries import RunSummary, Slowdown
from ckptbench.workload.local.report_rows import Row, fmt_int, fmt_interval, fmt_ratio, fmt_seconds


def both_rows(runs: Sequence[RunSummary]) -> list[Row]:
    """Both demands at once, for runs that ran them (docs/measurement.md): each side alone and
    together, and its slowdown with its 95% interval."""
    if not any(s.both is not None for s in runs):
        return []

    def get(name: str) -> Callable[[RunSummary], Any]:
        return lambda s: None if s.both is None else getattr(s.both, name)

    def slowdown(name: str) -> Callable[[RunSummary], Any]:
        def shown(s: RunSummary) -> str | None:
            found: Slowdown | None = None if s.both is None else getattr(s.both, name)
            return (
                None
                if found is None
                else f"{fmt_ratio(found.ratio)} " + fmt_interval(found.interval, fmt_ratio)
            )

        return shown

    rows = [Row("both: windows of K steps (cycles)", get("cycles"), fmt_int)]
    for side, label, fmt in (
        ("samples_per_second", "samples/s", lambda x: f"{x:.1f}"),
        ("au", "AU", lambda x: f"{100 * x:.1f}%"),
        ("save_seconds", "save (s)", fmt_seconds),
        ("stall_seconds", "stall (s)", fmt_seconds),
    ):
        rows += [Row(f"both: {label}, {w}", get(f"{side}_{w}"), fmt) for w in ("alone", "together")]
        if side != "au":
            name = "loader" if side == "samples_per_second" else side.split("_")[0]
            rows.append(Row(f"both: {name} slowdown [95%]", slowdown(f"{name}_slowdown"), str))
    return rows
