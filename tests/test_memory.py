"""The rank's malloc tuning: big freed buffers must leave the resident set."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ckptbench.workload.rank import memory

_PROBE = textwrap.dedent(
    """
    import ctypes, sys
    from ckptbench.workload.rank import memory
    if sys.argv[1] == "tuned":
        assert memory.return_big_buffers_to_the_os()

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    size = 24 << 20
    # Free one big block first: under glibc's default this raises the mmap threshold, and the
    # next blocks of that size come from the heap and stay resident once freed.
    block = ctypes.create_string_buffer(size)
    del block
    blocks = [ctypes.create_string_buffer(size) for _ in range(8)]
    # A live allocation above the blocks, as a rank always has: without it the freed blocks
    # could merge into the top of the heap and be trimmed, whatever the threshold.
    fence = ctypes.create_string_buffer(1 << 20)
    before = rss()
    del blocks
    print(before - rss())
    """
)


def _freed(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_freed_shards_leave_the_resident_set_only_when_tuned() -> None:
    size = 8 * (24 << 20)
    assert _freed("tuned") >= 0.9 * size
    # The default can keep most of it: the behaviour the tuning exists to avoid. Where the heap
    # lands is the kernel's choice, so one of three fresh processes must show it.
    assert min(_freed("default") for _ in range(3)) < 0.5 * size


def test_an_explicit_environment_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert memory.return_big_buffers_to_the_os() is False
