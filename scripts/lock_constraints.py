"""Rewrite the pinned part of constraints.txt from the environment this Python runs in.

    .venv/bin/python scripts/lock_constraints.py

Every distribution that pyproject.toml's dependencies and extras need, followed through each
one's own requirements (with the extras asked for), is pinned at the version installed here, and
so are pip and the build backend: `pip install -c constraints.txt` (scripts/setup.sh and both
Dockerfiles) then installs what was tested, and a rebuild of an image installs the same files.
The lines above the marker are kept as written (the pins that carry a reason).
"""

from __future__ import annotations

import importlib.metadata as md
import sys
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
MARKER = "# ---- pinned by scripts/lock_constraints.py from a tested environment; edit above ----"
# Not needed by any extra, but installing them is part of every build: the installer itself and
# what pyproject.toml's build-system requires.
TOOLS = ("pip",)


def wanted(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return True
    environment: dict[str, str] = dict(default_environment())
    return any(
        requirement.marker.evaluate({**environment, "extra": extra}) for extra in extras or {""}
    )


def closure(roots: list[Requirement]) -> dict[str, str]:
    """Installed name -> version for ``roots`` and everything they need."""
    pinned: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(r, frozenset({""})) for r in roots]
    root_names = {canonicalize_name(r.name) for r in roots}
    while todo:
        requirement, asked = todo.pop()
        if not wanted(requirement, asked):
            continue
        name = canonicalize_name(requirement.name)
        extras = frozenset(requirement.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            if name in root_names:  # an extra this environment does not install (peer)
                print(f"lock_constraints: {name} is not installed here: left unpinned")
                continue
            sys.exit(f"lock_constraints: {name} is needed but not installed here")
        pinned[name] = dist.version
        todo += [(Requirement(r), extras) for r in dist.requires or []]
    return pinned


def main() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requirements = [*project["project"]["dependencies"]]
    for extra in project["project"]["optional-dependencies"].values():
        requirements += extra
    requirements += project["build-system"]["requires"]
    requirements += TOOLS
    own = canonicalize_name(project["project"]["name"])
    pins = {
        name: version
        for name, version in closure([Requirement(r) for r in requirements]).items()
        if name != own
    }
    head = CONSTRAINTS.read_text().split(MARKER)[0].rstrip("\n")
    lines = [f"{name}=={version}" for name, version in sorted(pins.items())]
    CONSTRAINTS.write_text("\n".join([head, "", MARKER, *lines]) + "\n")
    print(f"lock_constraints: {len(lines)} pins written to {CONSTRAINTS.name}")


if __name__ == "__main__":
    main()
