"""Where a ``file://`` URL or a plain path points on this machine: one rule for every caller."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def local_path(url: str) -> Path:
    """``file:///a/b``, ``file://~/a`` or ``a/b`` -> the local path (``~`` expanded).

    Raises ``ValueError`` when no path is left, so that ``file://`` alone never means the current
    directory."""
    path = url.removeprefix("file://")
    if not path:
        raise ValueError(f"no path in {url!r}")
    return Path(path).expanduser()


def why_no_folder(path: Path) -> str | None:
    """Why ``path`` (a folder, or one to be made with its missing parents) cannot hold files made
    by this process, or None when it can.

    A folder is made and removed in the nearest folder that exists, leaving nothing: permission
    bits alone do not tell, for root, that /proc takes no folder.
    """
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        what = "is" if existing == path else f"lies under {str(existing)!r}, which is"
        return f"{str(path)!r} {what} not a directory"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".ckptbench-probe-", dir=existing))
    except OSError as exc:
        return f"cannot create folders in {str(existing)!r}: {exc.strerror or exc}"
    return None
