"""The embedded emulator with its data in memory, for the benches that time storage.

The disk is not what the benches model: with /dev/shm the emulator's objects (and anything else
a bench keeps beside them, such as the XML multipart shim's parts) live in memory.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ckptbench.workload.local.emulator import GcsEmulator


def scratch() -> str | None:
    """/dev/shm when the machine has it, else the default temporary folder."""
    return "/dev/shm" if Path("/dev/shm").is_dir() else None


@contextlib.contextmanager
def emulator_in_memory(prefix: str, bucket: str) -> Iterator[tuple[str, GcsEmulator]]:
    """A temporary folder in memory and an emulator keeping its data there, with ``bucket``
    made and ``STORAGE_EMULATOR_HOST`` naming it; both gone afterwards."""
    with (
        tempfile.TemporaryDirectory(prefix=prefix, dir=scratch()) as tmp,
        GcsEmulator(Path(tmp) / "emu") as emu,
    ):
        emu.create_bucket(bucket)
        os.environ["STORAGE_EMULATOR_HOST"] = emu.url
        yield tmp, emu
