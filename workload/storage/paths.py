"""Where a ``file://`` URL or a plain path points on this machine: one rule for every caller."""

from __future__ import annotations

from pathlib import Path


def local_path(url: str) -> Path:
    """``file:///a/b``, ``file://~/a`` or ``a/b`` -> the local path (``~`` expanded).

    Raises ``ValueError`` when no path is left, so that ``file://`` alone never means the current
    directory."""
    path = url.removeprefix("file://")
    if not path:
        raise ValueError(f"no path in {url!r}")
    return Path(path).expanduser()
