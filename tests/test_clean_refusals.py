"""``ckptbench clean`` acts only on what ckptbench wrote (issue 21).

Found: ``clean gs://`` and ``clean file:///`` became the relative folders ``gs:`` and ``file:``;
``clean --dry-run /usr`` listed 125,788 files to delete; ``clean --dry-run /.`` walked the root
filesystem; a real ``clean file:///tmp/x/store`` removed the folder itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckptbench.cli import main as ckptbench
from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.storage import clean, layout

pytestmark = pytest.mark.timeout(60)


def _refused(url: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert ckptbench(["clean", "--dry-run", url]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("", "no URL"),
        ("gs://", "a whole bucket is never cleaned"),
        ("gs:///x", "a whole bucket is never cleaned"),
        ("gs://b//", "a whole bucket is never cleaned"),
        ("file://", "no path after file://"),
        ("file:///", "/ is a system folder"),
        ("azure://b/x", "use gs://, s3:// or file://"),
        ("s3://b/x", "not a bucket name"),
        ("s3://bucket", "a whole bucket is never cleaned"),
        ("gs:", "looks like a URL scheme without '//'"),
        ("file:", "looks like a URL scheme without '//'"),
        ("/", "/ is a system folder"),
        ("/.", "/ is a system folder"),
        ("/tmp/..", "/ is a system folder"),
        ("/usr", "/usr is a system folder"),
        ("/usr/", "/usr is a system folder"),
        ("/usr/lib/python3", "lies under the system folder /usr"),
        ("/etc", "/etc is a system folder"),
        ("/proc/self", "lies under the system folder /proc"),
        ("/tmp", "/tmp is a system folder"),
        ("/home", "/home is a system folder"),
        ("/root", "/root is a system folder"),
    ],
)
def test_what_is_no_benchmark_prefix_is_refused_before_anything_is_listed(
    url: str, says: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)  # a relative "gs:" would land here
    err = _refused(url, capsys)
    assert says in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_home_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "alice"
    (home / "run" / "results").mkdir(parents=True)
    (home / "run" / "results" / "summary.json").write_text("{}")
    monkeypatch.setenv("HOME", str(home))
    assert "is a home folder" in _refused("~", capsys)
    assert "is a home folder" in _refused(f"file://{home}/", capsys)
    assert (home / "run" / "results" / "summary.json").exists()


def test_a_symlink_to_a_system_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "store").symlink_to("/etc")
    assert "/etc is a system folder" in _refused(str(tmp_path / "store"), capsys)


def test_a_folder_without_the_run_layout_is_refused_and_kept_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    (store / "photos").mkdir(parents=True)
    (store / "photos" / "a.jpg").write_bytes(b"x")
    (store / "notes.txt").write_text("x")
    (store / "summary.json").write_text("{}")  # a result's name, outside a run's results/
    err = _refused(str(store), capsys)
    assert "none of them ckptbench's run layout" in err
    assert ckptbench(["clean", str(store)]) == 2
    assert sorted(p.name for p in store.rglob("*")) == ["a.jpg", "notes.txt", "photos",
                                                        "summary.json"]  # fmt: skip


def _dead_run(store: Path, run: str) -> list[Path]:
    files = [
        store / run / "checkpoints" / "ckpt_0.ckpt" / "__0_0.distcp",
        store / run / "checkpoints" / "ckpt_0.ckpt" / ".metadata",
        store / run / "checkpoints" / "ckpt_1.ckpt" / "__1_0.distcp.parts" / "abc-00000",
        store / run / "results" / "rank-00000.json",
        store / run / "results" / "summary.json",
    ]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x")
    return files


def test_only_ckptbench_files_go_and_the_given_folder_stays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    _dead_run(store, "run-1")
    _dead_run(store, "run-2")
    (store / "README").write_text("mine")
    (store / "run-1" / "results" / "mine.txt").write_text("mine")
    (store / "run-1" / "checkpoints" / "draft").mkdir()
    assert ckptbench(["clean", f"file://{store}"]) == 0
    out = capsys.readouterr().out
    assert "deleted 10 object(s)" in out and "not ckptbench's and stay" in out
    left = sorted(str(p.relative_to(store)) for p in store.rglob("*"))
    assert left == ["README", "run-1", "run-1/checkpoints", "run-1/checkpoints/draft",
                    "run-1/results", "run-1/results/mine.txt"]  # fmt: skip


@pytest.mark.parametrize("level", ["store/run-1", "store/run-1/checkpoints",
                                   "store/run-1/checkpoints/ckpt_0.ckpt"])  # fmt: skip
def test_a_run_its_checkpoints_or_one_checkpoint_can_be_cleaned_and_stays(
    tmp_path: Path, level: str, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _dead_run(tmp_path / "store", "run-1")
    folder = tmp_path / level
    assert ckptbench(["clean", str(folder)]) == 0
    assert folder.is_dir()
    gone = [f for f in files if not f.exists()]
    assert gone == [f for f in files if folder in f.parents]


def test_a_system_like_tree_is_not_walked(tmp_path: Path) -> None:
    # Folders that cannot lead to the layout are not entered: a deep tree costs one read each
    # for its top two levels, not a walk.
    store = tmp_path / "store"
    deep = store / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (deep / "x").write_text("x")
    entered: list[str] = []
    real = os.scandir

    def spy(path: os.PathLike[str] | str) -> object:
        entered.append(str(path))
        return real(path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "scandir", spy)
        ours, others = layout.local_files(store)
    assert ours == [] and others == 1
    assert entered == [str(store), str(store / "a")]


def test_the_layout_is_what_a_run_writes(tmp_path: Path) -> None:
    config = WorkloadConfig(
        checkpoint_path=str(tmp_path / "store"), backend="file", layer_size=10, padding_size=1,
        world_size=1, run_id="run-x",
    )  # fmt: skip
    prefix = clean.check(str(tmp_path / "store"))
    written = [
        f"{config.checkpoint_id(3)}/__0_0.distcp",
        f"{config.checkpoint_id(0)}/.metadata",
        f"{config.results_path}/rank-00000.json",
        f"{config.results_path}/summary.json",
    ]
    for path in written:
        name = path.removeprefix(str(tmp_path / "store") + "/")
        assert layout.is_ours(name, prefix.own), name
    assert not layout.is_ours("run-x/results/../../etc/passwd", prefix.own)
    assert not layout.is_ours("run-x/other/summary.json", prefix.own)
