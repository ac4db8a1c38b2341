"""``ckptbench render``: the JobSet the operator would create, for dry runs and GitOps.

Input: CheckpointBenchmark, DataLoadingBenchmark and their sweeps' YAML documents from
files, directories (their *.yaml, *.yml and *.json), glob patterns, or ``-`` for standard input;
``-f`` takes several and repeats. A sweep is expanded into the child benchmarks the operator
would create for it, and each child is rendered as a benchmark. Documents of other kinds (the
PersistentVolumeClaim beside a benchmark) are skipped with a note on standard error. Files must be
UTF-8 and free of YAML anchors and aliases.
Output: the JobSets as a multi-document YAML stream. Nothing is printed unless every benchmark
is valid; each problem names its file, document and field, and the exit status is 2.

An owner reference needs the benchmark's uid, which only the API server assigns. Unless the
document carries ``metadata.uid`` or ``--uid`` is given, the placeholder :data:`DRY_RUN_UID`
(all zeros, deterministic, so output is reproducible) stands in and the output says so; the
operator always uses the real uid. ``--no-owner-reference`` leaves the reference out instead, for
a JobSet applied on its own. The uid is also part of the run's folder under checkpointPath.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from ckptbench.operator import manifests
from ckptbench.operator.data.model import parse_data_spec
from ckptbench.operator.data.names import KIND as DATA_KIND
from ckptbench.operator.data.render import render_data_jobset
from ckptbench.operator.render.jobset import RenderDefaults, RenderError, render_jobset
from ckptbench.operator.spec import policy
from ckptbench.operator.spec.names import (
    API_VERSION,
    CHART_WORKLOAD_IMAGE,
    CHART_WORKLOAD_SERVICE_ACCOUNT,
    IMAGE_PULL_POLICIES,
    KIND,
    validate_name,
)
from ckptbench.operator.spec.parse import SpecError, parse_spec
from ckptbench.operator.spec.policy import Policy
from ckptbench.operator.sweep.cells import CellError, render_child
from ckptbench.operator.sweep.cells import expand as sweep_cells
from ckptbench.operator.sweep.kinds import SWEEP_KINDS, SweepKind, sweep_kind_of
from ckptbench.operator.sweep.model import parse_sweep_of
from ckptbench.workload.contract import inputs

DRY_RUN_UID = "00000000-0000-0000-0000-000000000000"
DEFAULT_NAMESPACE = "default"
EXIT_INVALID = 2


@dataclass(frozen=True)
class Options:
    defaults: RenderDefaults
    uid: str | None
    owner: bool


def render_documents(
    documents: list[Any],
    source: str,
    options: Options,
    notes: list[str] | None = None,
    seen: dict[tuple[str, str], str] | None = None,
) -> tuple[list[dict[str, Any]], list[str], bool]:
    """JobSets for ``documents``, the problems found, and whether the placeholder uid was used.
    Documents of other kinds are skipped, each with a line in ``notes``; ``seen`` holds the
    benchmarks already named (namespace, name), across files."""
    notes = [] if notes is None else notes
    jobsets: list[dict[str, Any]] = []
    problems: list[str] = []
    placeholder = False
    named: dict[tuple[str, str], str] = {} if seen is None else seen
    queue: list[tuple[str, Any]] = []
    for number, document in enumerate(documents, start=1):
        where = f"{source} (document {number})"
        sweep = sweep_kind_of(document.get("kind")) if isinstance(document, dict) else None
        if isinstance(document, dict) and sweep is not None:
            children, found = sweep_children(document, where, options.defaults.policy, sweep)
            problems += found
            queue += [(f"{where}, cell {n}", child) for n, child in enumerate(children, 1)]
            if children:
                first, last = (c["metadata"]["name"] for c in (children[0], children[-1]))
                notes.append(
                    f"{where}: sweep {document['metadata']['name']}: {len(children)} cell(s), "
                    f"rendered as its child benchmarks {first} .. {last}"
                )
        else:
            queue.append((where, document))
    for where, document in queue:
        if not isinstance(document, dict):
            problems.append(f"{where}: not a mapping but {type(document).__name__}")
            continue
        if not _ours(document):
            other = (document.get("metadata") or {}).get("name", "?")
            notes.append(
                f"{where}: skipped {document.get('kind')} {other}: not a {BENCHMARK_KINDS}"
            )
            continue
        found = _check_document(document)
        kind = _KINDS.get(document.get("kind"), _KINDS[KIND])
        try:
            spec = kind.parse(document.get("spec"), options.defaults.policy)
        except SpecError as exc:
            found += exc.problems
        if found:
            problems += [f"{where}: {problem}" for problem in found]
            continue
        metadata = document["metadata"]
        name: str = metadata["name"]
        namespace: str = metadata.get("namespace") or DEFAULT_NAMESPACE
        if (namespace, name) in named:
            # Applied together, the second would replace the first (or, of another kind, fail
            # to create its JobSet, which has the benchmark's name).
            problems.append(
                f"{where}: metadata.name: {namespace}/{name} is also {named[(namespace, name)]}"
            )
            continue
        named[(namespace, name)] = where
        where = f"{source} ({namespace}/{name})"
        uid = metadata.get("uid") or options.uid
        if not uid:
            uid, placeholder = DRY_RUN_UID, placeholder or options.owner
        try:
            jobsets.append(
                kind.render(name, namespace, uid, spec, options.defaults, owner=options.owner)
            )
        except RenderError as exc:
            problems.append(f"{where}: {exc}")
    return jobsets, problems, placeholder


def sweep_children(
    document: dict[str, Any], where: str, policy: Policy, kind: SweepKind
) -> tuple[list[dict[str, Any]], list[str]]:
    """The child benchmarks the operator creates for a sweep document of ``kind``, as it makes
    them (same cells, kind, names and owner), or the problems that make it create none."""
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        return [], [f"{where}: metadata: missing or not a mapping"]
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return [], [f"{where}: metadata.name: missing"]
    namespace = metadata.get("namespace") or DEFAULT_NAMESPACE
    try:
        spec = parse_sweep_of(kind.spec_model, document.get("spec") or {})
        cells = sweep_cells(spec)
    except (ValueError, CellError) as exc:
        return [], [f"{where}: {exc}"]
    refused = policy.problems(spec.template)
    if refused:
        # As the operator says it, before it creates any child.
        return [], [f"{where}: {p.replace('spec.', 'spec.template.', 1)}" for p in refused]
    uid = metadata.get("uid") or DRY_RUN_UID
    return [render_child(name, namespace, str(uid), cell) for cell in cells], []


_TOP_LEVEL = ("apiVersion", "kind", "metadata", "spec", "status")


class _Render(Protocol):
    def __call__(
        self,
        name: str,
        namespace: str,
        uid: str,
        spec: Any,
        defaults: RenderDefaults,
        *,
        owner: bool = True,
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class _Kind:
    """How a benchmark kind's spec is read and rendered: the operator's own functions."""

    parse: Callable[[object, Policy], Any]
    render: _Render


# The benchmark kinds, each rendered as the operator renders it.
_KINDS: dict[object, _Kind] = {
    KIND: _Kind(parse_spec, render_jobset),
    DATA_KIND: _Kind(parse_data_spec, render_data_jobset),
}
BENCHMARK_KINDS = f"{KIND} or {DATA_KIND}"


def _check_document(document: dict[str, Any]) -> list[str]:
    said = document.get("kind") if document.get("kind") in _KINDS else KIND
    problems = [
        f"{key}: unknown field (a {said} has {', '.join(_TOP_LEVEL)})"
        for key in document
        if key not in _TOP_LEVEL
    ]
    if document.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: expected {API_VERSION}, got {document.get('apiVersion')!r}")
    if document.get("kind") not in _KINDS:
        problems.append(f"kind: expected {BENCHMARK_KINDS}, got {document.get('kind')!r}")
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        return [*problems, "metadata: missing or not a mapping"]
    name = metadata.get("name")
    reason = validate_name(name) if isinstance(name, str) else "metadata.name: missing"
    if reason:
        problems.append(reason)
    namespace = metadata.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        problems.append(f"metadata.namespace: must be a non-empty string, got {namespace!r}")
    uid = metadata.get("uid")
    if uid is not None and not isinstance(uid, str):
        problems.append(f"metadata.uid: must be a string, got {uid!r}")
    return problems


# Kinds of our group that are not benchmarks (a sweep is expanded before this is asked).
OTHER_KINDS = frozenset(k.kind for k in SWEEP_KINDS)
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def expand(arguments: list[str]) -> tuple[list[str], list[str]]:
    """The files ``-f`` names: directories give their manifests, patterns their matches (each
    sorted); and the problems (a pattern or directory that names nothing)."""
    paths: list[str] = []
    problems: list[str] = []
    for argument in arguments:
        if argument == "-":
            paths.append(argument)
        elif Path(argument).is_dir():
            found = sorted(
                str(p) for p in Path(argument).iterdir() if p.suffix in MANIFEST_SUFFIXES
            )
            paths += found
            if not found:
                problems.append(f"{argument}: a directory without *.yaml, *.yml or *.json files")
        elif glob.has_magic(argument):
            found = sorted(glob.glob(argument))
            paths += found
            if not found:
                problems.append(f"{argument}: no file matches")
        else:
            paths.append(argument)
    return paths, problems


def _read(path: str) -> str:
    limit = manifests.MAX_BYTES
    if path == "-":
        return inputs.read_stream(sys.stdin.buffer, limit, manifests.WHAT).decode("utf-8")
    return inputs.read_bounded(path, limit, manifests.WHAT).decode("utf-8")


def _ours(document: dict[str, Any]) -> bool:
    """Whether the document is meant as a benchmark (so its problems are errors)."""
    api_version = document.get("apiVersion")
    group = api_version.split("/")[0] if isinstance(api_version, str) else None
    kind = document.get("kind")
    if kind in _KINDS:
        return True
    return group == API_VERSION.split("/")[0] and kind not in OTHER_KINDS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ckptbench render",
        description="Print the JobSet the operator creates for each CheckpointBenchmark and "
        "DataLoadingBenchmark, and for each child benchmark of a CheckpointBenchmarkSweep or a "
        "DataLoadingBenchmarkSweep.",
        epilog=f"Without metadata.uid or --uid, owner references carry the placeholder uid "
        f"{DRY_RUN_UID}; the operator fills in the benchmark's real one.",
    )
    parser.add_argument(
        "-f",
        "--filename",
        action="extend",
        nargs="+",
        required=True,
        metavar="FILE",
        help="CheckpointBenchmark or DataLoadingBenchmark YAML (one or more documents): files, "
        "directories, glob patterns; '-' reads standard input. Takes several, and repeats.",
    )
    parser.add_argument(
        "--default-image",
        default=os.environ.get("CKPTBENCH_DEFAULT_IMAGE") or None,
        help="Image for benchmarks without spec.image (env CKPTBENCH_DEFAULT_IMAGE).",
    )
    parser.add_argument(
        "--default-image-pull-policy",
        default=os.environ.get("CKPTBENCH_DEFAULT_IMAGE_PULL_POLICY") or "IfNotPresent",
        choices=IMAGE_PULL_POLICIES,
        help="Pull policy for benchmarks without spec.imagePullPolicy (default IfNotPresent).",
    )
    policy.add_options(parser)
    owner = parser.add_mutually_exclusive_group()
    owner.add_argument("--uid", help="The benchmark's uid, for the owner reference and run path.")
    owner.add_argument(
        "--no-owner-reference",
        action="store_true",
        help="Leave out the owner reference (a JobSet applied without its CheckpointBenchmark).",
    )
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    options = Options(
        defaults=RenderDefaults(
            image=args.default_image or CHART_WORKLOAD_IMAGE,
            image_pull_policy=args.default_image_pull_policy,
            policy=policy.from_args(
                args, args.default_image or CHART_WORKLOAD_IMAGE, [CHART_WORKLOAD_SERVICE_ACCOUNT]
            ),
        ),
        uid=args.uid,
        owner=not args.no_owner_reference,
    )
    jobsets: list[dict[str, Any]] = []
    paths, problems = expand(args.filename)
    notes: list[str] = []
    named: dict[tuple[str, str], str] = {}
    placeholder = False
    if args.default_image is None:
        notes.append(
            f"benchmarks without spec.image get the chart's default workload image "
            f"{CHART_WORKLOAD_IMAGE} (--default-image or CKPTBENCH_DEFAULT_IMAGE for another)"
        )
    for path in paths:
        source = "<stdin>" if path == "-" else path
        try:
            documents = manifests.load_plain(_read(path))
        except OSError as exc:
            problems.append(f"{source}: cannot read: {exc.strerror or exc}")
            continue
        except UnicodeDecodeError as exc:
            problems.append(
                f"{source}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                f"{exc.start})"
            )
            continue
        except (manifests.ManifestError, inputs.InputTooLarge) as exc:
            problems.append(f"{source}: {exc}")
            continue
        except yaml.YAMLError as exc:
            problems.append(f"{source}: not valid YAML: {exc}")
            continue
        if not documents:
            problems.append(f"{source}: no documents")
            continue
        rendered, found, used = render_documents(documents, source, options, notes, named)
        jobsets += rendered
        problems += found
        placeholder = placeholder or used
    if not jobsets and not problems:
        # Rendering nothing is no success: the input named the wrong file (`-f /etc/shadow`).
        problems.append(
            f"{', '.join(args.filename)}: holds no {KIND}, {DATA_KIND}, "
            f"{' or '.join(k.kind for k in SWEEP_KINDS)}: nothing to render"
        )
    for note in notes:
        print(f"ckptbench render: note: {note}", file=sys.stderr)
    if problems:
        for problem in problems:
            print(f"ckptbench render: {problem}", file=sys.stderr)
        return EXIT_INVALID
    header = "# Rendered by `ckptbench render`.\n"
    if placeholder:
        header += (
            f"# ownerReferences[].uid {DRY_RUN_UID} is a dry-run placeholder: the operator uses "
            "the benchmark's real uid (pass --uid, or --no-owner-reference).\n"
        )
    sys.stdout.write(header + manifests.dump_all(jobsets))
    return 0
