"""``ckptbench run -f FILE``: the CheckpointBenchmark (or sweep) a cluster would take, run here.

The file is read and validated as the operator reads it (the same strict YAML, the same spec
model and rules, the same messages), then its benchmark settings become ``ckptbench run``
options: each setting the spec sets becomes its declared flag (``contract/settings.py``); a
sweep's axes become comma lists. Options typed on the command line come after, so they win, and
the run says which fields they replaced. What only a cluster has (image, resources, volumes,
scheduling) does not apply here, and the run says so.

It lives above both halves of the package: the workload never imports the operator, so neither
the local runner nor the spec model can hold this translation.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from ckptbench.operator import manifests
from ckptbench.operator.data.names import KIND as DATA_KIND
from ckptbench.operator.spec.names import API_VERSION, KIND
from ckptbench.operator.spec.parse import SpecError, parse_spec
from ckptbench.operator.sweep.cells import DATA_SWEEP_KIND, SWEEP_KIND
from ckptbench.operator.sweep.model import parse_sweep
from ckptbench.workload.contract import inputs
from ckptbench.workload.contract.declaration import Declared
from ckptbench.workload.contract.settings import BenchmarkSettings, declared
from ckptbench.workload.local import cli as local_cli
from ckptbench.workload.local.options import OPTION_OF, OPTIONS, Option, option

EXIT_USAGE = 2
_FILE_FLAGS = ("-f", "--filename")


class ManifestProblem(ValueError):
    """The file cannot be run; the message names the file and the field."""


def main(argv: Sequence[str]) -> int:
    return run_with_file(argv, "run", local_cli.main, options_of)


def run_with_file(
    argv: Sequence[str],
    command: str,
    local_main: Callable[[list[str]], int],
    read: Callable[[str], tuple[list[str], list[str]]],
) -> int:
    """``ckptbench <command>`` with ``-f FILE``: the options ``read`` makes of the file, then the
    ones typed (which win, and the run says which it replaced); without ``-f``, the command as
    it is."""
    try:
        path, rest = _take_file(list(argv))
    except ManifestProblem as exc:
        print(f"ckptbench {command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if path is None:
        return local_main(rest)
    try:
        options, notes = read(path)
    except ManifestProblem as exc:
        print(f"ckptbench {command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    typed = _flags(rest)
    replaced = [flag for flag in _flags(options) if flag in typed]
    for note in notes:
        print(f"ckptbench {command}: note: {note}", file=sys.stderr)
    if replaced:
        print(
            f"ckptbench {command}: the command line replaces {', '.join(replaced)} of {path}",
            file=sys.stderr,
        )
    return local_main([*options, *rest])


def _take_file(argv: list[str]) -> tuple[str | None, list[str]]:
    for i, word in enumerate(argv):
        if word in _FILE_FLAGS:
            if i + 1 >= len(argv):
                raise ManifestProblem(f"{word}: needs a file")
            return argv[i + 1], argv[:i] + argv[i + 2 :]
        for flag in _FILE_FLAGS:
            if word.startswith(flag + "="):
                return word.split("=", 1)[1], argv[:i] + argv[i + 1 :]
    return None, argv


def _flags(argv: Sequence[str]) -> list[str]:
    return [word.split("=", 1)[0] for word in argv if word.startswith("--")]


def read_documents(path: str) -> list[Any]:
    """The documents of ``path``, read as the operator reads a manifest (strict YAML, bounded)."""
    try:
        data = inputs.read_bounded(path, manifests.MAX_BYTES, manifests.WHAT)
    except OSError as exc:
        raise ManifestProblem(f"{path}: cannot read: {exc.strerror or exc}") from None
    except inputs.InputTooLarge as exc:
        raise ManifestProblem(f"{path}: {exc}") from None
    try:
        return manifests.load_plain(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ManifestProblem(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    except yaml.YAMLError as exc:
        raise ManifestProblem(f"{path}: not valid YAML: {exc}") from None
    except (manifests.ManifestError, ValueError) as exc:
        raise ManifestProblem(f"{path}: {exc}") from None


def the_one(
    path: str, documents: list[Any], kinds: tuple[str, ...], what: str, elsewhere: dict[str, str]
) -> tuple[dict[str, Any], list[str]]:
    """The one document of ``kinds`` in ``path`` (``what`` names them in the error), and a note
    for each other document skipped. A document of our group that another command runs is
    refused naming that command (``elsewhere``: kind -> command)."""
    ours = [
        d
        for d in documents
        if isinstance(d, dict) and str(d.get("apiVersion", "")).split("/")[0] == _GROUP
    ]
    for document in ours:
        other = elsewhere.get(str(document.get("kind")))
        if other is not None:
            raise ManifestProblem(
                f"{path}: holds a {document.get('kind')}: run it with `{other} -f {path}`"
            )
    if len(ours) != 1:
        raise ManifestProblem(f"{path}: holds {len(ours)} {what}; run one at a time")
    (document,) = ours
    if document.get("kind") not in kinds:
        raise ManifestProblem(
            f"{path}: kind: expected {' or '.join(kinds)}, got {document.get('kind')!r}"
        )
    notes = [
        f"skipped {d.get('kind')} {(d.get('metadata') or {}).get('name', '?')}: a cluster's object"
        for d in documents
        if d is not document and isinstance(d, dict)
    ]
    return document, notes


def cluster_only_note(spec: BaseModel, settings: type[BaseModel]) -> list[str]:
    """A note naming the fields ``spec`` sets that are no ``settings``: a cluster's, of no effect
    on this machine."""
    cluster_only = sorted(
        to_camel(name) for name in spec.model_fields_set if name not in settings.model_fields
    )
    if not cluster_only:
        return []
    return [f"{', '.join(cluster_only)}: a cluster's settings, without effect here"]


def options_of(path: str) -> tuple[list[str], list[str]]:
    """``ckptbench run`` options for the one benchmark or sweep in ``path``, and notes."""
    document, notes = the_one(
        path,
        read_documents(path),
        (KIND, SWEEP_KIND),
        "CheckpointBenchmarks or sweeps",
        {DATA_KIND: "ckptbench data", DATA_SWEEP_KIND: "ckptbench data"},
    )
    try:
        if document.get("kind") == SWEEP_KIND:
            sweep = parse_sweep(document.get("spec"))
            options = _settings_options(sweep.template)
            options += axes_options(sweep.axes, path, lambda name: option(OPTION_OF[name]))
            spec = sweep.template
        else:
            spec = parse_spec(document.get("spec"))
            options = _settings_options(spec)
    except (SpecError, ValueError) as exc:
        raise ManifestProblem(f"{path}: {exc}") from None
    return options, notes + cluster_only_note(spec, BenchmarkSettings)


_GROUP = API_VERSION.split("/")[0]


def _settings_options(spec: BenchmarkSettings) -> list[str]:
    return settings_options(spec, declared(), lambda name: option(OPTION_OF[name]))


def settings_options(
    spec: BaseModel, settings: Iterable[Declared], option_of: Callable[[str], Option]
) -> list[str]:
    """The options of every setting the spec sets (its defaults are the runner's own), written as
    the command's own option table (``option_of`` a setting's name) takes them: a switch only when
    the spec sets it to what the switch gives."""
    out: list[str] = []
    for d in settings:
        if d.name not in spec.model_fields_set:
            continue
        value = getattr(spec, d.name)
        o = option_of(d.name)
        if isinstance(value, BaseModel):  # a group (dataLoading): its switch, then its settings
            out.append(o.flag)
            for name in value.model_fields_set:
                inner = next(x for x in OPTIONS if x.field == f"{d.name}.{name}")
                given = getattr(value, name)
                if inner.is_switch:
                    if given == inner.const:
                        out.append(inner.flag)
                elif given is not None:
                    out += [inner.flag, _text(given)]
            continue
        if o.is_switch:
            if value == o.const:
                out.append(o.flag)
        elif value is not None:
            out += [o.flag, _text(value)]
    return out


def axes_options(
    axes: BaseModel | None, path: str, option_of: Callable[[str], Option]
) -> list[str]:
    """A sweep's axes as the command's comma lists (``option_of`` a setting's name)."""
    if axes is None:
        raise ManifestProblem(
            f"{path}: spec.cells: a list of cells cannot be run here; give spec.axes (a cross "
            "product), or run each cell's benchmark"
        )
    out: list[str] = []
    for name in type(axes).model_fields:
        values = getattr(axes, name)
        if values is None:
            continue
        o = option_of(name)
        if o.is_switch:
            raise ManifestProblem(
                f"{path}: spec.axes.{to_camel(name)}: a switch cannot vary in one local run"
            )
        out += [o.flag, ",".join(_text(v) for v in values)]
    return out


def _text(value: Any) -> str:
    return str(getattr(value, "value", value))
