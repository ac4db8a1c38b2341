"""No import circles in ``ckptbench``, including the ones an import inside a function hides.

import-linter and the interpreter see only what runs at import time; a module that imports its
caller inside a function is a circle all the same: neither side can be read, tested or moved
without the other. The graph here is built from the source with ``ast``, every import statement
counted wherever it stands, so the path a reader follows (``ckptbench worker`` -> loop -> state ->
DCP -> storage) is the path the graph shows.

Edge kinds, named in every failure:

- ``top``: runs when the module is imported (module or class body, ``try``, ``if`` at the top);
- ``deferred``: inside a function, runs when the function is first called;
- ``type-checking``: under ``if TYPE_CHECKING:``, never runs. It still counts: a module that names
  another's types depends on it to be read, and if type-only imports closed no circle they would
  become the next place to hide one (move the import under ``TYPE_CHECKING`` and the check passes,
  the circle stays). What both sides share belongs where both can import it;
- ``by name``: ``importlib.import_module`` or ``__import__`` called with a module's name written
  out. Other strings that name a module are not imports: the local runner starts ranks as
  ``python -m ckptbench.cli worker``, another process, and ``ckptbench.cli``'s table of
  subcommands is looked up at run time (nothing imports the entry point, so it closes no circle).
"""

from __future__ import annotations

import ast
import itertools
import os
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ckptbench"
# The rooms a circle is reported against; one that spans rooms fails each of them.
ROOMS = ("ckptbench.workload", "ckptbench.operator", "ckptbench")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    kind: str  # top, deferred, type-checking, by name

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line}, {self.kind})"


def module_files(package_dir: Path, package: str) -> dict[str, Path]:
    """Every module under ``package_dir`` by dotted name, through symlinked folders (the
    ``ckptbench/operator`` and ``ckptbench/workload`` links)."""
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(package_dir, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        parts = [package, *Path(folder).relative_to(package_dir).parts]
        for name in files:
            if name.endswith(".py"):
                stem = name.removesuffix(".py")
                found[".".join(parts if stem == "__init__" else [*parts, stem])] = (
                    Path(folder) / name
                )
    return found


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _statements(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Every node with the kind of context it runs in."""

    def walk(node: ast.AST, kind: str) -> Iterator[tuple[ast.AST, str]]:
        yield node, kind
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            inner = kind if kind == "type-checking" else "deferred"
            for child in ast.iter_child_nodes(node):
                yield from walk(child, inner)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from walk(child, "type-checking")
            for child in node.orelse:  # the ``else`` of ``if TYPE_CHECKING`` runs
                yield from walk(child, kind)
        else:
            for child in ast.iter_child_nodes(node):
                yield from walk(child, kind)

    return walk(tree, "top")


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest module of the package that importing ``name`` runs, or None (not ours)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _base(module: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join([*package, node.module] if node.module else package)


def _imported_by_name(node: ast.AST) -> str | None:
    """The module ``importlib.import_module("...")`` or ``__import__("...")`` imports, if
    ``node`` is such a call with the name written out."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func, arg = node.func, node.args[0]
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called not in ("import_module", "__import__"):
        return None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    return None


def import_edges(modules: dict[str, Path]) -> list[Edge]:
    """Every import of one module of the package by another, with its line and kind."""
    edges: dict[Edge, None] = {}  # one per statement, however many names it imports
    for module, path in sorted(modules.items()):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node, kind in _statements(tree):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [_known(alias.name, modules) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _base(module, path, node)
                targets = [_known(f"{base}.{alias.name}", modules) for alias in node.names]
            elif (name := _imported_by_name(node)) is not None:
                targets, kind = [_known(name, modules)], "by name"
            for target in targets:
                if target is not None and target != module:
                    edges[Edge(module, target, getattr(node, "lineno", 0), kind)] = None
    return list(edges)


def _components(nodes: list[str], out: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan), each sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in out.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            found.append(sorted(component))

    for v in nodes:
        if v not in index:
            visit(v)
    return sorted(found)


def cycles(edges: list[Edge]) -> list[list[Edge]]:
    """One shortest circle through the first module of each set of modules that import each
    other (directly or around a loop), as the edges that close it."""
    out: dict[str, list[str]] = {}
    first_edge: dict[tuple[str, str], Edge] = {}
    for e in edges:
        if (e.source, e.target) not in first_edge:
            out.setdefault(e.source, []).append(e.target)
            first_edge[(e.source, e.target)] = e
    nodes = sorted({e.source for e in edges} | {e.target for e in edges})
    circles: list[list[Edge]] = []
    for component in _components(nodes, out):
        if len(component) < 2:
            continue  # self-imports are dropped when the edges are made
        members = set(component)
        start = component[0]
        came_from: dict[str, str] = {}
        queue = deque([start])
        while queue:
            v = queue.popleft()
            for w in out.get(v, []):
                if w in members and w not in came_from:
                    came_from[w] = v
                    queue.append(w)
        path = [start]
        while path[-1] != start or len(path) == 1:
            path.append(came_from[path[-1]])
        path.reverse()
        circles.append([first_edge[(a, b)] for a, b in itertools.pairwise(path)])
    return circles


def describe(circle: list[Edge]) -> str:
    return "import circle:\n  " + "\n  ".join(str(e) for e in circle)


def _room_of(module: str) -> str:
    return next(room for room in ROOMS if module == room or module.startswith(room + "."))


def _package_edges() -> list[Edge]:
    return import_edges(module_files(ROOT / PACKAGE, PACKAGE))


# The rank program's path as ``ckptbench worker`` runs it, each step imported at the top of the
# module before it: the path a reader (and import-linter) follows from the entry point.
RANK_PATH = (
    ("ckptbench.workload.rank.worker", "ckptbench.workload.rank.rendezvous"),
    ("ckptbench.workload.rank.worker", "ckptbench.workload.rank.loop"),
    ("ckptbench.workload.rank.loop", "ckptbench.workload.rank.state"),
    ("ckptbench.workload.rank.state", "ckptbench.workload.rank.model_state"),
    ("ckptbench.workload.rank.loop", "ckptbench.workload.storage.session"),
    ("ckptbench.workload.rank.worker", "ckptbench.workload.storage.objects"),
)


def test_the_graph_sees_every_room() -> None:
    modules = module_files(ROOT / PACKAGE, PACKAGE)
    assert {"ckptbench.cli", "ckptbench.workload.rank.worker"} <= set(modules)
    assert sum(m.startswith("ckptbench.operator.") for m in modules) > 20
    assert sum(m.startswith("ckptbench.workload.") for m in modules) > 40


@pytest.mark.parametrize("room", ROOMS)
def test_no_import_circles(room: str) -> None:
    found = [c for c in cycles(_package_edges()) if any(_room_of(e.source) == room for e in c)]
    if found:
        pytest.fail("\n".join(describe(c) for c in found), pytrace=False)


def test_the_rank_programs_path_is_imported_at_the_top() -> None:
    top = {(e.source, e.target) for e in _package_edges() if e.kind == "top"}
    assert [step for step in RANK_PATH if step not in top] == []


def test_the_rank_program_defers_no_import_of_the_package() -> None:
    """What a deferral could save is torch's import, which the rank program pays on its way to
    the rendezvous anyway; what a library reads at its import (gcsfs's HNS flag) is set before
    the library's first use, whatever our imports. A deferred import here would only hide a step."""
    hidden = [
        str(e)
        for e in _package_edges()
        if e.source.startswith("ckptbench.workload.rank.") and e.kind != "top"
    ]
    assert hidden == []


# -- the checker itself, on small packages made for it ---------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> list[Edge]:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_edges(module_files(tmp_path / "pkg", "pkg"))


def test_a_circle_closed_inside_a_function_is_named(tmp_path: Path) -> None:
    edges = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "def f() -> None:\n    from pkg import b\n",
            "b.py": "import os\nfrom pkg.a import f\n",
            "c.py": "from pkg import a\n",
        },
    )
    assert [describe(c) for c in cycles(edges)] == [
        "import circle:\n  pkg.a -> pkg.b (line 2, deferred)\n  pkg.b -> pkg.a (line 2, top)"
    ]


def test_a_circle_closed_by_a_type_checking_import_is_named(tmp_path: Path) -> None:
    edges = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": (
                "import typing\nif typing.TYPE_CHECKING:\n    from . import b\nelse:\n"
                "    from . import c\n"
            ),
            "b.py": "from .a import thing\n",
            "c.py": "",
        },
    )
    assert [[str(e) for e in c] for c in cycles(edges)] == [
        ["pkg.a -> pkg.b (line 3, type-checking)", "pkg.b -> pkg.a (line 1, top)"]
    ]
    assert "pkg.a -> pkg.c (line 5, top)" in map(str, edges)  # the ``else`` runs


def test_longer_circles_through_relative_imports_and_subpackages(tmp_path: Path) -> None:
    edges = _package(
        tmp_path,
        {
            "__init__.py": "",
            "sub/__init__.py": "",
            "sub/x.py": "from ..y import z\n",
            "y.py": "import importlib\nimportlib.import_module('pkg.sub.w')\n",
            "sub/w.py": "from . import x\n",
            "free.py": "from pkg.sub import x\n",
        },
    )
    assert [[str(e) for e in c] for c in cycles(edges)] == [
        [
            "pkg.sub.w -> pkg.sub.x (line 1, top)",
            "pkg.sub.x -> pkg.y (line 1, top)",
            "pkg.y -> pkg.sub.w (line 2, by name)",
        ]
    ]


def test_no_circle_without_a_way_back(tmp_path: Path) -> None:
    edges = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg import b\nimport pkg.c\n",
            "b.py": "def f() -> None:\n    import pkg.c\n",
            "c.py": "import json\n",
        },
    )
    assert len(edges) == 3
    assert cycles(edges) == []


def test_symlinked_folders_are_followed(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "__init__.py").write_text("")
    (tmp_path / "elsewhere" / "m.py").write_text("from pkg import top\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "linked").symlink_to(tmp_path / "elsewhere")
    edges = _package(tmp_path, {"__init__.py": "", "top.py": "from pkg.linked import m\n"})
    assert [e.source for e in cycles(edges)[0]] == ["pkg.linked.m", "pkg.top"]
