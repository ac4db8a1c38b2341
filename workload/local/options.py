"""The options of ``ckptbench run``: one table, from which the parser, the sweep axes and the error
messages are all derived.

Every declared benchmark setting (``contract/settings.py``) is an option, made from its
declaration: its flag, its help (the description), its parser (by type, or sizes for a unit of
bytes), its default on a laptop, and whether it takes a comma list (a sweep axis). A boolean is a
switch that sets the opposite of its default. Only the runner's own options (``--storage``,
``--json``, ...) are written here. A run has one cell per combination of the listed values.
Values are parsed in :mod:`plan`, not by argparse, so that a bad value is reported as
``--option: reason`` like the configuration's own checks.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from pydantic import ValidationError

from ckptbench.workload.contract import settings
from ckptbench.workload.contract.config import field_errors
from ckptbench.workload.contract.data.settings import LoaderSettings
from ckptbench.workload.contract.declaration import declared_fields

DEFAULT_TIMEOUT_SECONDS = 3600.0

_E = TypeVar("_E", bound=enum.Enum)
_DECLARED: Any = object()  # from_setting's default: the declaration's own


class UsageError(ValueError):
    """A bad option; the message names it."""


@dataclass(frozen=True)
class Option:
    """One option of ``ckptbench run``."""

    flag: str
    help: str
    field: str | None = None  # the WorkloadConfig field it sets; None: read by the runner itself
    parse: Callable[[str], Any] | None = None  # parses one value; None: a switch
    default: Any = None  # the parsed default of a value option (None: decided by the plan)
    metavar: str = "N"
    sweep: bool = True  # a value option takes a comma list, one cell per value
    const: Any = True  # the value a switch gives its field when present
    answers_for: tuple[str, ...] = ()  # config fields it sets indirectly, for error messages
    group: str = "runner"  # the --help group it is listed in (a setting's: where it is declared)

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def name(self) -> str:
        return self.flag.removeprefix("--")

    @property
    def is_switch(self) -> bool:
        return self.parse is None

    @property
    def is_axis(self) -> bool:
        """Whether it may take a comma list: a value option that sets a config field."""
        return self.sweep and not self.is_switch and self.field is not None


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str) -> int:
    """``32MiB``, ``32M``, ``512KiB``, ``1GiB`` (all 1024-based) or a bare number of bytes."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"not a size: {text!r} (use e.g. 32MiB, 512KiB, 1GiB or a number of bytes)"
        )
    unit = (m.group(2) or "").upper()[:1]
    value = float(m.group(1)) * _UNITS[unit if unit != "B" else ""]
    if value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number of bytes: {text!r}")
    return int(value)


def _one_of(kind: type[_E], what: str) -> Callable[[str], _E]:
    """A parser of a member of ``kind`` by its value, any case; a bad one names the valid ones."""

    def parse(text: str) -> _E:
        try:
            return kind(text.lower())
        except ValueError:
            valid = ", ".join(str(member.value) for member in kind)
            raise argparse.ArgumentTypeError(
                f"unknown {what} {text!r} (choose from {valid})"
            ) from None

    return parse


def parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _parser_of(d: settings.Declared) -> Callable[[str], Any] | None:
    """How an option's text becomes the setting's value: by its type (or its unit, for sizes)."""
    if d.setting.unit == "bytes":
        return parse_size
    kind = d.annotation
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if args:
        kind = args[0]
    if kind is bool:
        return None
    if kind is int:
        return parse_int
    if kind is float:
        return parse_float
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return _one_of(kind, d.name.replace("_", " "))
    return str


def _help(d: settings.Declared, parse: Callable[[str], Any] | None, default: Any) -> str:
    text = (d.field.description or d.name).rstrip(".")
    if parse is None:
        text = (d.setting.switch or text).rstrip(".")
        return f"{text} (this switch sets {d.name} to {str(not d.field.default).lower()})"
    if default is not None:
        shown = default.value if isinstance(default, enum.Enum) else default
        unit = f" {d.setting.unit}" if d.setting.unit and d.setting.unit != "bytes" else ""
        text += f" [default here: {shown}{unit}]"
    return str(text)


def _local_default(d: settings.Declared) -> Any:
    if d.setting.has_local_default():
        return d.setting.local_default
    return None if d.field.is_required() else d.field.default


def group_of(d: settings.Declared) -> str:
    """The --help group of a declared setting: its room's, so a new setting lands in the group
    of the class it is declared in, with no edit here."""
    return str(vars(d.owner)["OPTIONS_GROUP"])


# Each group's title and description in --help: a room's from its class (its OPTIONS_GROUP and
# its docstring's first paragraph), then the runner's own.
def room_groups(model: type) -> dict[str, str]:
    rooms = [cls for cls in model.__mro__ if "OPTIONS_GROUP" in vars(cls)]
    return {
        str(vars(cls)["OPTIONS_GROUP"]): " ".join((cls.__doc__ or "").split("\n\n")[0].split())
        for cls in rooms
    }


RUNNER_GROUP = "Where the ranks run and where their results go: the local runner's own options."
GROUPS: dict[str, str] = {
    **room_groups(settings.BenchmarkSettings),
    **room_groups(LoaderSettings),
    "runner": RUNNER_GROUP,
}


def from_setting(d: settings.Declared, default: Any = _DECLARED) -> Option:
    """The option of a declared setting; ``default`` replaces its default (``ckptbench sizes``
    sizes a model preset at 8 ranks unless told otherwise)."""
    parse = _parser_of(d)
    if parse is None:  # a switch: sets the opposite of the declared default
        return Option(
            d.flag, _help(d, None, None), d.name, const=not d.field.default, group=group_of(d)
        )
    if default is _DECLARED:
        default = _local_default(d)
    return Option(
        d.flag,
        _help(d, parse, default),
        d.name,
        parse,
        default,
        metavar=d.setting.metavar or "N",
        sweep=d.setting.axis,
        group=group_of(d),
    )


# The runner's own options: where the ranks run and where their results go.
_RUNNER: tuple[Option, ...] = (
    Option(
        "--filename",
        "-f FILE: run the CheckpointBenchmark or CheckpointBenchmarkSweep (axes) in this YAML "
        "file, validated as the operator would; options given beside it replace its fields",
        parse=str,
        metavar="FILE",
        sweep=False,
    ),
    Option(
        "--storage",
        "file:///path, a plain path, gs://bucket/prefix or s3://bucket/prefix (default: an "
        "embedded emulator: GCS's, or an S3 server for backends s3 and s3fs)",
        parse=str,
        metavar="URL",
        sweep=False,
        answers_for=("checkpoint_path",),
    ),
    Option(
        "--emulator",
        "with a gs:// or s3:// --storage: create its bucket on an embedded emulator (GCS's, or "
        "moto's S3 server) instead of the real store",
    ),
    Option(
        "--timeout",
        "seconds one cell's run may take before its ranks are stopped (default 3600)",
        parse=parse_float,
        default=DEFAULT_TIMEOUT_SECONDS,
        metavar="SECONDS",
        sweep=False,
        answers_for=("collective_timeout_seconds",),
    ),
    Option(
        "--verbose",
        "show every log line of the storage libraries, their known noise too (gcsfs's moveTo "
        "fallback against the emulator, urllib3's retries); by default each rank hides it and "
        "says how many it hid",
    ),
    Option(
        "--quiet",
        "show no progress and no rank lines: only the table, the failures under it and errors",
    ),
    Option(
        "--json",
        "write every cell's summary as JSON here (read by 'ckptbench compare' and 'report')",
        parse=str,
        metavar="FILE",
        sweep=False,
    ),
    Option(
        "--csv",
        "write a row per cell here: settings, figures, MLPerf Storage's column names",
        parse=str,
        metavar="FILE",
        sweep=False,
    ),
)


def group_options(d: settings.Declared) -> tuple[Option, ...]:
    """The options of a group of settings (``data_loading``): a switch that sets the group with
    its defaults, then each of its settings' own options behind the group's prefix
    (``--data-batch-size``), which sets ``group.name`` and the group with it. No defaults here:
    what is not given is the group's own."""
    prefix = d.setting.options_prefix
    assert prefix is not None
    (model,) = [k for k in typing.get_args(d.annotation) if k is not type(None)]
    switch = Option(
        "--" + d.name.replace("_", "-"),
        f"{(d.field.description or d.name).rstrip('.')} (this switch turns it on with its "
        f"defaults; any {prefix}* option turns it on too)",
        d.name,
        const={},
        group=model.OPTIONS_GROUP,
    )
    inner = []
    for m in declared_fields(model, first_from=model):
        o = from_setting(m, default=None)
        inner.append(
            dataclasses.replace(
                o, flag=prefix + m.flag.removeprefix("--"), field=f"{d.name}.{m.name}"
            )
        )
    return (switch, *inner)


# Every declared setting is an option (contract/settings.py), then the runner's own.
OPTIONS: tuple[Option, ...] = (
    *(
        o
        for d in settings.declared()
        if not d.setting.runner
        for o in (group_options(d) if d.setting.options_prefix else (from_setting(d),))
    ),
    *_RUNNER,
)

# WorkloadConfig field -> the option that sets it, so a validation error names what the user typed.
OPTION_OF: dict[str, str] = {
    **{o.field: o.flag for o in OPTIONS if o.field},
    **{f: o.flag for o in OPTIONS for f in o.answers_for},
}


def option(flag: str) -> Option:
    for o in OPTIONS:
        if o.flag == flag:
            return o
    raise KeyError(flag)


class _Parser(argparse.ArgumentParser):
    """argparse, with a suggestion for a misspelt option instead of a bare "unrecognized"."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            for word in message.split(":", 1)[1].split():
                if not word.startswith("--"):
                    continue
                flag = word.split("=", 1)[0]
                flags = [o.flag for o in OPTIONS]
                close = [f for f in flags if f.startswith(flag)] or difflib.get_close_matches(
                    flag, flags, n=1
                )
                if close:
                    message += f" (did you mean {' or '.join(close[:3])}?)"
                    break
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    # No abbreviations: "--wor 2" would otherwise set --world-size (or, once another option
    # starts alike, silently another one), and a typo would run a full default benchmark.
    p = _Parser(
        allow_abbrev=False,
        prog="ckptbench run",
        description=(
            "Benchmark torch.distributed.checkpoint save/load with N local ranks. With no "
            "--storage, an embedded emulator (GCS's, or an S3 server for backends s3 and s3fs) "
            "is started and stopped. Options marked LIST "
            "take a comma list; the run then measures every combination (one cell each) in turn."
        ),
    )
    add_options(p, OPTIONS)
    return p


def add_options(
    p: argparse.ArgumentParser, listed: Sequence[Option], described: Mapping[str, str] = GROUPS
) -> None:
    """``listed`` on ``p``, each in its named group (described in ``described``), the groups in
    the order their first option comes."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for o in listed:
        if o.group not in groups:
            groups[o.group] = p.add_argument_group(f"{o.group} options", described[o.group])
        add_option(groups[o.group], o)


def add_option(p: argparse._ActionsContainer, o: Option) -> None:
    """``o`` on parser ``p``: a switch, or text parsed later by :func:`values_of`."""
    if o.is_switch:
        p.add_argument(o.flag, dest=o.dest, action="store_true", help=o.help)
    elif o.is_axis:
        # Kept as text: the plan splits and parses it, naming the option on a bad value.
        p.add_argument(o.flag, dest=o.dest, metavar=f"{o.metavar}[,...]", help=o.help)
    else:
        p.add_argument(o.flag, dest=o.dest, metavar=o.metavar, help=o.help)


def values_of(o: Option, raw: str | None) -> list[tuple[str, Any]]:
    """An option's values as (text typed, parsed value); its default when not given."""
    assert o.parse is not None, o.flag
    if raw is None:
        return [] if o.default is None else [(str(o.default), o.default)]
    texts = [t.strip() for t in raw.split(",")] if o.is_axis else [raw]
    if o.is_axis and not all(texts):
        raise UsageError(f"{o.flag}: empty value in list {raw!r}")
    out: list[tuple[str, Any]] = []
    for text in texts:
        try:
            value = o.parse(text)
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise UsageError(f"{o.flag}: {exc}") from None
        if any(value == seen for _, seen in out):
            raise UsageError(f"{o.flag}: {text!r} is listed twice")
        out.append((text, value))
    return out


def explain(
    exc: ValidationError, where: Sequence[str] = (), option_of: Mapping[str, str] | None = None
) -> str:
    """Name the option behind each validation error, not the model's field (``option_of``: field
    -> option; ``ckptbench run``'s by default)."""
    if option_of is None:
        option_of = OPTION_OF
    lines = []
    for problem in field_errors(exc):
        if problem.broken is not None:  # a cross-field rule: each field it names as its option
            lines.append(problem.broken.say(lambda field: option_of.get(field, field)))
            continue
        flag = option_of.get(problem.field, problem.field or "options")
        got = f" (got {problem.value!r})" if problem.has_value else ""
        lines.append(f"{flag}: {problem.reason}{got}")
    text = "; ".join(lines)
    return f"{text} (in cell {' '.join(where)})" if where else text
