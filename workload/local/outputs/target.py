"""Where an output file goes: checked before the run, written whole after it.

A target is standard output (``-``) or a regular file. Anything else is refused before any work
is done, naming the option: a directory, a device or other special file (as root, renaming a
temporary file over ``/dev/full`` or ``/dev/null`` would replace the device with a file), a place
that cannot be written, or a file another option already writes. A regular file is written
atomically: a temporary file beside it, then renamed over it, so an interrupted write never
leaves half a results file, and a failed one leaves no temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ckptbench.workload.storage.file.paths import why_no_folder

STDOUT = "-"


class TargetError(ValueError):
    """An output target that cannot be written; the message names the option."""


@dataclass(frozen=True)
class Target:
    """An output's destination: ``path`` None is standard output."""

    flag: str
    path: Path | None

    @property
    def is_stdout(self) -> bool:
        return self.path is None

    def write(self, text: str) -> None:
        if self.path is None:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        _write_atomically(self.path, text)


def check(flag: str, raw: str) -> Target:
    """The target an option names, refused now if it could not be written after the run."""
    if raw == STDOUT:
        return Target(flag, None)
    path = Path(raw).absolute()
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise TargetError(f"{flag}: cannot use {raw!r}: {exc.strerror or exc}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise TargetError(f"{flag}: {raw!r} is a directory; give a file name")
    if mode is not None and not stat.S_ISREG(mode):
        raise TargetError(
            f"{flag}: {raw!r} is not a regular file (a device, pipe or socket); give a file "
            f"name, or {STDOUT} for standard output"
        )
    parent = path.parent
    if parent.is_dir():
        # The write makes a temporary file beside the target: make one now. Permission bits
        # alone do not tell, for root, that /sys or /proc take no file.
        try:
            fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=parent)
        except OSError as exc:
            raise TargetError(
                f"{flag}: cannot write {raw!r}: no file can be made in {str(parent)!r} "
                f"({exc.strerror or exc})"
            ) from None
        os.close(fd)
        os.unlink(probe)
        if mode is not None and not os.access(path, os.W_OK):
            raise TargetError(f"{flag}: cannot write {raw!r}: permission denied")
    else:
        # The missing folders are made when the output is written; that they can be is checked
        # now.
        problem = why_no_folder(parent)
        if problem is not None:
            raise TargetError(f"{flag}: {problem}")
    return Target(flag, path)


def check_all(targets: list[Target]) -> None:
    """Refuse two options writing to one place: the second would overwrite the first."""
    seen: dict[str, str] = {}
    for t in targets:
        key = STDOUT if t.path is None else str(t.path.resolve())
        if key in seen:
            where = "standard output" if t.path is None else repr(str(t.path))
            raise TargetError(f"{t.flag}: {seen[key]} already writes {where}")
        seen[key] = t.flag


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def table_stream(targets: Sequence[Target | None]) -> TextIO:
    """Where the table goes: standard output, unless a target writes its JSON or CSV there."""
    return sys.stderr if any(t is not None and t.is_stdout for t in targets) else sys.stdout


def write_each(outputs: Sequence[tuple[Target | None, str]], command: str) -> bool:
    """Write each output asked for; False when one could not be written (each failure named)."""
    ok = True
    for target, text in outputs:
        if target is None:
            continue
        try:
            target.write(text)
        except OSError as exc:
            # Checked before the run, but a disk can fill or a folder go meanwhile.
            print(
                f"{command}: {target.flag}: could not write {str(target.path)!r}: "
                f"{exc.strerror or exc}",
                file=sys.stderr,
            )
            ok = False
    return ok
