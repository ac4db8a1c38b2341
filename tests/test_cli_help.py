"""`ckptbench run --help` and `sizes --help` in named groups, each setting in its room's; shell
completion as a shell asks argcomplete for it."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ckptbench import completion
from ckptbench.cli import COMMANDS
from ckptbench.workload.contract import settings
from ckptbench.workload.contract.state_settings import StateSettings
from ckptbench.workload.contract.storage_settings import ServiceSettings, StorageSettings
from ckptbench.workload.local import options, sizes_cli

ROOT = Path(__file__).resolve().parents[1]


def groups(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    """Each argument group's title -> the long flags listed in it."""
    return {
        str(group.title): {s for a in group._group_actions for s in a.option_strings if s != "-h"}
        for group in parser._action_groups
    }


def room_of(name: str) -> str:
    """Where a setting is declared, read from the classes' own fields, not from options.py."""
    if name in vars(ServiceSettings)["__annotations__"]:
        return "service options"
    if name in vars(StorageSettings)["__annotations__"]:
        return "storage options"
    if name in vars(StateSettings)["__annotations__"]:
        return "state options"
    return "run options"


@pytest.mark.parametrize(
    "build", [options.build_parser, sizes_cli.build_parser], ids=["run", "sizes"]
)
def test_every_setting_is_listed_in_the_group_of_the_class_that_declares_it(
    build: object,
) -> None:
    parser = build()  # type: ignore[operator]
    found = groups(parser)
    listed = {flag: title for title, flags in found.items() for flag in flags}
    shown = [d for d in settings.declared() if d.flag in listed]
    assert len(shown) > 10
    for d in shown:
        wanted = "runner options" if d.setting.runner else room_of(d.name)
        if d.setting.options_prefix:  # a group's switch is listed with the group's own options
            wanted = "loader options"
        assert listed[d.flag] == wanted, d.name


def test_run_help_has_the_five_groups_each_described_and_the_runners_own() -> None:
    parser = options.build_parser()
    found = groups(parser)
    rooms = {"state options", "run options", "storage options", "service options"}
    assert rooms | {"runner options"} <= set(found)
    assert {"--project", "--s3-endpoint"} <= found["service options"]
    assert {"--storage", "--json", "--quiet", "--timeout"} <= found["runner options"]
    assert {"--backend", "--threads"} <= found["storage options"]
    assert {"--world-size"} <= found["state options"]
    assert {"--procedure", "--save-mode"} <= found["run options"]
    # Nothing is left in argparse's catch-all group but -h.
    assert found.get("options", set()) == {"--help"}
    text = parser.format_help()
    assert "storage options:\n  Where the checkpoints go, and how" in text


def _complete(line: str, tmp_path: Path, env: dict[str, str] | None = None) -> list[str]:
    out = tmp_path / "completions"
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from ckptbench.cli import main; sys.exit(main())"],
        env={
            **os.environ,
            **(env or {}),
            "_ARGCOMPLETE": "1",
            "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
            "_ARGCOMPLETE_IFS": "\n",
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [w.strip() for w in out.read_text().split("\n") if w.strip()]


def test_completion_names_the_commands_and_each_commands_options(tmp_path: Path) -> None:
    assert set(_complete("ckptbench ", tmp_path)) >= set(COMMANDS)
    assert _complete("ckptbench run --wor", tmp_path) == ["--world-size"]
    assert _complete("ckptbench run --qu", tmp_path) == ["--quiet"]
    assert _complete("ckptbench sizes --mlp", tmp_path) == ["--mlperf"]


def test_the_completion_parser_carries_every_option_of_run() -> None:
    top = completion.parser(COMMANDS)
    run = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    flags = {s for a in run._actions for s in a.option_strings}
    assert {o.flag for o in options.OPTIONS} <= flags
