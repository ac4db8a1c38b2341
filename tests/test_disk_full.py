"""A full disk is named as such on every rank: ENOSPC, the path and the bytes needed (issue 21).

Found: a 5 MiB tmpfs reported only ``RuntimeError ... unexpected pos 704 vs 598`` (torch.save's
zip writer drops the OSError). /dev/full fails every write with ENOSPC, which makes a full disk
without mounting anything; a real tmpfs is used too where this process may mount one.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.rank.failures import CheckpointFailure
from ckptbench.workload.storage.file import backend as file_backend
from ckptbench.workload.storage.file.backend import DiskFull, ReportingFileSystem
from ckptbench.workload.storage.session import open_session
from tests import workers


def test_a_write_to_a_full_device_raises_disk_full_naming_path_and_bytes() -> None:
    fs = ReportingFileSystem(rank_bytes=4096, total_bytes=8192)
    with pytest.raises(DiskFull) as err, fs.create_stream(Path("/dev/full"), "wb") as stream:
        torch.save(
            torch.zeros(100_000), cast(IO[bytes], stream)
        )  # torch alone says "unexpected pos"
    assert err.value.errno == errno.ENOSPC
    assert err.value.filename == "/dev/full"
    assert str(err.value).startswith(
        "ENOSPC: No space left on device: the checkpoint needs 8.00 KiB (8192 bytes), "
        "4.00 KiB (4096 bytes) from this rank; "
    )
    assert str(err.value).endswith(" free there (/dev/full)")


class _FailsOnce(io.FileIO):
    """A file whose first large write fails with ENOSPC and whose later writes (the close's
    flush) succeed: torch's zip writer then drops the error and raises its own."""

    failed = False

    def write(self, b: Any) -> int:
        if len(memoryview(b)) > 1000 and not self.failed:
            self.failed = True
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(b)


def test_an_enospc_that_torch_drops_is_still_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Nearly(file_backend._KeepingFileIO, _FailsOnce):
        pass

    monkeypatch.setattr(file_backend, "_KeepingFileIO", Nearly)
    fs = ReportingFileSystem(rank_bytes=4096, total_bytes=8192)
    with pytest.raises(DiskFull) as err, fs.create_stream(tmp_path / "x", "wb") as stream:
        torch.save(torch.zeros(100_000), cast(IO[bytes], stream))
    assert str(err.value).startswith("ENOSPC: No space left on device: the checkpoint needs ")
    assert err.value.filename == str(tmp_path / "x")
    # What torch raised instead ("unexpected pos ..."), kept as the context.
    assert not isinstance(err.value.__cause__, OSError)


def test_another_write_error_keeps_its_errno_and_gains_the_path(tmp_path: Path) -> None:
    fs = ReportingFileSystem(rank_bytes=1, total_bytes=1)
    with pytest.raises(OSError) as err, fs.create_stream(tmp_path / "x", "wb") as stream:
        stream.write(b"abc")
        stream.flush()
        os.close(stream.fileno())  # the next write fails with EBADF
        stream.write(b"def")
        stream.flush()
    assert not isinstance(err.value, DiskFull)
    assert err.value.errno == errno.EBADF
    assert err.value.filename == str(tmp_path / "x")


def test_reads_and_good_writes_go_through_unchanged(tmp_path: Path) -> None:
    fs = ReportingFileSystem(rank_bytes=1, total_bytes=1)
    with fs.create_stream(tmp_path / "x", "wb") as stream:
        torch.save(torch.arange(4), cast(IO[bytes], stream))
    with fs.create_stream(tmp_path / "x", "rb") as stream:
        assert torch.equal(torch.load(cast(IO[bytes], stream)), torch.arange(4))


def test_a_file_backend_save_on_a_full_disk_fails_naming_enospc_path_and_bytes(
    tmp_path: Path,
) -> None:
    config = workers.one_rank(tmp_path)
    checkpoint = tmp_path / "ckpt" / "c0"
    checkpoint.mkdir(parents=True)
    # DCP names rank 0's data file so; on /dev/full every write fails with ENOSPC.
    (checkpoint / "__0_0.distcp").symlink_to("/dev/full")
    session = open_session(config)
    with pytest.raises(CheckpointException) as err:
        dcp_save({"t": torch.ones(100_000)}, storage_writer=session.writer(f"file://{checkpoint}"))
    text = str(CheckpointFailure.of("save", err.value, str(checkpoint)))
    assert text.startswith("save failed on rank 0: ENOSPC: No space left on device: "), text
    assert f"({config.total_bytes} bytes)" in text
    assert f"({checkpoint / '__0_0.distcp'})" in text
    assert "unexpected pos" not in text


@pytest.fixture
def small_tmpfs() -> Iterator[Path]:
    """A 5 MiB tmpfs, where this process may mount one (root on Linux); else the test skips."""
    where = Path(tempfile.mkdtemp(prefix="ckptbench-tmpfs-"))
    mounted = shutil.which("mount") is not None and (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(where)], capture_output=True
        ).returncode
        == 0
    )
    try:
        if not mounted:
            pytest.skip("cannot mount a tmpfs here")
        yield where
    finally:
        if mounted:
            subprocess.run(["umount", str(where)], check=False)
        where.rmdir()


def test_two_ranks_on_a_full_tmpfs_both_name_enospc(small_tmpfs: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "run", "--storage", str(small_tmpfs),
         "--world-size", "2", "--layer-size", "1000", "--padding-size", "4",
         "--samples", "1", "--warmup", "0"],
        cwd=workers.ROOT, env=workers.base_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    for rank in (0, 1):  # every rank's own error line, as the runner shows them
        (line,) = [x for x in proc.stderr.splitlines() if f"[rank {rank}] error: " in x]
        assert "ENOSPC: No space left on device: the checkpoint needs" in line, line
        assert "(16000000 bytes)" in line  # the whole checkpoint: 1000 * 1000 * 4 * 4 bytes
        assert "unexpected pos" not in line
