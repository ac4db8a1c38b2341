"""Output files are checked before the run and written whole after it (issue 21).

Found: ``--json /dev/full`` exited 0 and, as root, replaced the device with a regular file;
``--csv /tmp`` ran the whole benchmark and then died; ``--json F --csv F`` lost the JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ckptbench.workload.local.options import UsageError, build_parser
from ckptbench.workload.local.outputs import target
from ckptbench.workload.local.plan import plan

TINY = ["--layer-size", "100", "--padding-size", "2", "--samples", "1", "--warmup", "0"]


def _plan(tmp_path: Path, *argv: str) -> None:
    plan(build_parser().parse_args(["--storage", str(tmp_path / "store"), *TINY, *argv]))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--json", "/dev/full"], "--json: '/dev/full' is not a regular file"),
        (["--csv", "/dev/null"], "--csv: '/dev/null' is not a regular file"),
        (["--csv", "/tmp"], "--csv: '/tmp' is a directory"),
        (["--json", "/proc/ckb/x.json"], "--json: cannot create folders in '/proc'"),
        (["--csv", "/dev/null/x.csv"], "--csv: cannot use '/dev/null/x.csv': Not a directory"),
        (["--json", "-", "--csv", "-"], "--csv: --json already writes standard output"),
    ],
)
def test_a_target_that_cannot_take_the_results_is_refused_before_the_run(
    tmp_path: Path, argv: list[str], says: str
) -> None:
    with pytest.raises(UsageError) as err:
        _plan(tmp_path, *argv)
    assert says in str(err.value)
    assert not (tmp_path / "store").exists()  # nothing started


def test_one_file_for_both_outputs_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(UsageError, match=r"--csv: --json already writes '.*out'"):
        _plan(tmp_path, "--json", str(out), "--csv", str(tmp_path / "." / "out"))


def test_a_regular_file_is_replaced_whole_and_no_temporary_file_stays(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    out.write_text("old")
    checked = target.check("--json", str(out))
    checked.write('{"new": true}\n')
    assert out.read_text() == '{"new": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.json"
    out.write_text("old")
    checked = target.check("--json", str(out))

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.replace", refuse)
    with pytest.raises(OSError, match="No space"):
        checked.write("new")
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_json_to_standard_output_puts_the_table_aside(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ckptbench.cli", "run", "--storage", str(tmp_path / "s"), *TINY,
         "--world-size", "1", "--json", "-"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # the JSON alone on standard output
    assert doc["succeeded"] is True
    assert "ranks reported" in proc.stderr  # the table went to standard error


@pytest.mark.parametrize(
    ("storage", "says"),
    [
        ("{tmp}/afile", "--storage: '{tmp}/afile' is not a directory"),
        ("{tmp}/afile/x", "--storage: '{tmp}/afile/x' lies under '{tmp}/afile', which is not a"),
        # A system folder is refused first, by the rule ckptbench clean applies too.
        ("/proc/ckb", "--storage: /proc/ckb lies under the system folder /proc"),
    ],
)
def test_a_local_storage_the_ranks_cannot_write_under_is_refused_before_they_start(
    tmp_path: Path, storage: str, says: str
) -> None:
    (tmp_path / "afile").write_text("")
    args = build_parser().parse_args(["--storage", storage.format(tmp=tmp_path), *TINY])
    with pytest.raises(UsageError) as err:
        plan(args)
    assert says.format(tmp=tmp_path) in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # the probe left nothing


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # Root may write anything by its permission bits; /proc and /sys still take no file.
        (["--json", "/proc/version"], "--json: cannot write '/proc/version': no file can be made"),
        (["--json", "/sys/x.json"], "--json: cannot write '/sys/x.json': no file can be made"),
    ],
)
def test_a_place_that_takes_no_file_is_refused_before_the_run(
    tmp_path: Path, argv: list[str], says: str
) -> None:
    with pytest.raises(UsageError) as err:
        _plan(tmp_path, *argv)
    assert says in str(err.value)


def test_a_write_that_fails_after_the_run_is_an_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno

    from ckptbench.workload.local import cli

    def full(path: Path, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(target, "_write_atomically", full)
    out = tmp_path / "out.json"
    code = cli.main(["--storage", str(tmp_path / "s"), *TINY, "--world-size", "1",
                     "--json", str(out)])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert f"ckptbench run: --json: could not write '{out}': No space left on device" in err
    assert "Traceback" not in err
