"""The rank's allocator: chosen by procedure, recorded, and freed shards leave the resident set."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ckptbench.workload.contract.choices import Procedure
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.local.emulator import free_port
from ckptbench.workload.rank import worker
from ckptbench.workload.rank.process import environment, memory
from ckptbench.workload.storage import objects as objectio
from tests.workers import one_rank

_PROBE = textwrap.dedent(
    """
    import ctypes, json, sys
    from ckptbench.workload.contract.choices import Procedure
    from ckptbench.workload.rank.process import memory
    if sys.argv[1] == "fixed":
        assert memory.return_big_buffers_to_the_os()
        setting = None
    else:
        setting = memory.configure_allocator(Procedure(sys.argv[1]), environ={}).record()

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
    trimmed = memory.after_drop()  # what the loop calls once a saved shard is dropped
    print(json.dumps({"freed": before - rss(), "trimmed": trimmed, "setting": setting}))
    """
)
SIZE = 8 * (24 << 20)


def _probe(mode: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True
    )
    doc: dict[str, object] = json.loads(out.stdout)
    return doc


def _freed(mode: str) -> int:
    value = _probe(mode)["freed"]
    assert isinstance(value, int)
    return value


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")


@linux_only
def test_a_fixed_threshold_returns_freed_shards() -> None:
    assert _freed("fixed") >= 0.9 * SIZE


@linux_only
def test_the_reference_runs_at_glibc_defaults_which_keep_freed_blocks() -> None:
    doc = _probe("reference")
    assert doc["setting"] == {
        "malloc": "glibc defaults (dynamic mmap threshold)",
        "mmap_threshold_bytes": None,
        "trim_after_drop": False,
        "source": "procedure",
    }
    assert doc["trimmed"] is False
    # The default can keep most of it: where the heap lands is the kernel's choice, so one of
    # three fresh processes must show it.
    assert min(_freed("reference") for _ in range(3)) < 0.5 * SIZE


@linux_only
@pytest.mark.parametrize("procedure", ["ckptbench", "mlperf"])
def test_our_procedures_run_at_defaults_and_trim_once_a_shard_is_dropped(procedure: str) -> None:
    doc = _probe(procedure)
    setting = doc["setting"]
    assert isinstance(setting, dict)
    assert setting["mmap_threshold_bytes"] is None and setting["trim_after_drop"] is True
    assert doc["trimmed"] is True
    assert all(_freed(procedure) >= 0.9 * SIZE for _ in range(3))


def test_an_explicit_environment_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert memory.return_big_buffers_to_the_os() is False
    setting = memory.configure_allocator(Procedure.CKPTBENCH)
    assert setting.record() == {
        "malloc": "fixed mmap threshold 65536 B",
        "mmap_threshold_bytes": 65536,
        "trim_after_drop": False,
        "source": "environment",
    }
    assert memory.after_drop() is False  # the user's setting, untouched: no trimming either


def test_each_rank_records_the_allocator_it_ran() -> None:
    config = WorkloadConfig(
        checkpoint_path="/tmp/x", backend="file", procedure="reference", warmup_samples=0
    )
    setting = memory.configure_allocator(config.procedure, environ={})
    described = environment.describe(config, allocator=setting.record())
    assert described["allocator"]["malloc"] == "glibc defaults (dynamic mmap threshold)"
    assert "allocator" not in environment.describe(config)


def test_a_rank_records_in_its_result_the_allocator_it_ran(tmp_path: Path) -> None:
    config = one_rank(
        tmp_path, procedure="reference", sample_count=1, master_port=free_port(),
        rendezvous_timeout_seconds=20, termination_log="",
    )  # fmt: skip
    assert worker.run(config) == 0
    full = json.loads(objectio.read_text(f"{config.results_path}/rank-00000.json"))
    assert full["environment"]["allocator"] == {
        "malloc": "glibc defaults (dynamic mmap threshold)",
        "mmap_threshold_bytes": None,
        "trim_after_drop": False,
        "source": "procedure",
    }
