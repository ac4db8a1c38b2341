"""This process's memory as Linux reports it, for the benches' peak-RSS probes."""

from __future__ import annotations

from pathlib import Path


def vm(field: str) -> int:
    """A ``/proc/self/status`` figure (``VmRSS``, ``VmHWM``, ...) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    """Start VmHWM afresh from the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    Path("/proc/self/clear_refs").write_text("5")
