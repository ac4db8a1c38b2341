"""A rank's settings as ``CKPTBENCH_*`` environment variables and back, for every kind of rank.

The operator renders a rank's config into its pod's environment (:func:`to_env`); the rank parses
it back (:func:`from_env`) into the same pydantic model and fails fast, naming the variable, on a
bad value (:class:`ConfigError`). Both the checkpoint rank (``config.WorkloadConfig``) and the
data-loading rank (``data.config.DataConfig``) make the round trip here.
"""

from __future__ import annotations

import enum
import json
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ckptbench.workload.contract.rule import Broken

ENV_PREFIX = "CKPTBENCH_"

_M = TypeVar("_M", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration value is missing or wrong; the message names the variable and the reason."""


def to_env(model: BaseModel, skip: set[str]) -> dict[str, str]:
    """Every field of ``model`` but ``skip`` as a variable; a None that is not the field's default
    becomes an empty value (leaving it out would bring the default back)."""
    env: dict[str, str] = {}
    fields = type(model).model_fields
    for name, value in model.model_dump(exclude=skip).items():
        held = getattr(model, name)
        if isinstance(held, BaseModel):  # a group of settings (data_loading): one JSON value
            value = held.model_dump_json()
        if value is None:
            if fields[name].default is None:
                continue
            value = ""
        env[ENV_PREFIX + name.upper()] = _env_str(value)
    return env


def from_env(
    cls: type[_M],
    environ: Mapping[str, str] | None,
    aliases: Mapping[str, tuple[str, ...]],
    overrides: Mapping[str, Any],
    convert: Mapping[str, Callable[[str], str]] | None = None,
) -> _M:
    """Parse ``cls`` from the environment: each field from its variable, else from its aliases
    (in order); ``convert`` turns an alias's value into the field's. An empty value means none
    for a field that may be none."""
    env = os.environ if environ is None else environ
    raw: dict[str, Any] = {}
    source: dict[str, str] = {}
    for field in cls.model_fields:
        for var in env_names(field, aliases):
            if var in env:
                value = env[var]
                if convert and var in convert:
                    value = convert[var](value)
                raw[field] = value
                source[field] = var
                break
    for field, info in cls.model_fields.items():
        if raw.get(field) == "" and type(None) in typing.get_args(info.annotation):
            raw[field] = None
        elif isinstance(raw.get(field), str) and _is_group(info.annotation):
            try:
                raw[field] = json.loads(raw[field])
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"invalid configuration: {source[field]} ({field}): not a JSON object: {exc}"
                ) from None
    raw.update(overrides)
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None


def _is_group(annotation: Any) -> bool:
    """Whether a field holds a group of settings (a model), which a variable holds as JSON."""
    kinds = typing.get_args(annotation) or (annotation,)
    return any(isinstance(k, type) and issubclass(k, BaseModel) for k in kinds)


def unknown_variables(
    environ: Mapping[str, str], cls: type[BaseModel], allowed: Callable[[str], bool]
) -> list[str]:
    """``CKPTBENCH_*`` variables that name no field of ``cls`` and that ``allowed`` does not
    know: most likely a misspelt setting, silently left at its default otherwise."""
    known = {ENV_PREFIX + field.upper() for field in cls.model_fields}
    return sorted(
        v for v in environ if v.startswith(ENV_PREFIX) and v not in known and not allowed(v)
    )


def env_names(field: str, aliases: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The variables that set ``field``, ours first: ours win when both are set."""
    return (ENV_PREFIX + field.upper(), *aliases.get(field, ()))


def describe_variables(cls: type[BaseModel], aliases: Mapping[str, tuple[str, ...]]) -> list[str]:
    """A help listing: each variable, its aliases, its description and its default."""
    lines = []
    for name, field in cls.model_fields.items():
        names = env_names(name, aliases)
        default = "required" if field.is_required() else f"default {_default_text(field.default)}"
        also = f" (also {', '.join(names[1:])})" if len(names) > 1 else ""
        lines.append(f"  {names[0]}{also}")
        lines.append(f"      {field.description or ''} [{default}]")
    return lines


def _default_text(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _env_str(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


@dataclass(frozen=True)
class FieldError:
    """One validation problem, tied to the field it is about."""

    field: str  # empty when no field could be named
    reason: str
    value: Any
    has_value: bool
    broken: Broken | None = None  # a cross-field rule: its fields can be named another way


def field_errors(exc: ValidationError) -> list[FieldError]:
    """The problems of a validation error, each with its field, for messages that name it.

    Cross-field checks carry no location, so they name their field as ``"field: reason"``.
    """
    problems = []
    for err in exc.errors():
        reason = str(err["msg"]).removeprefix("Value error, ")
        field = str(err["loc"][0]) if err["loc"] else ""
        if not field and ": " in reason:
            field, reason = reason.split(": ", 1)
        error = (err.get("ctx") or {}).get("error")
        broken = error if isinstance(error, Broken) else None
        problems.append(FieldError(field, reason, err.get("input"), bool(err["loc"]), broken))
    return problems


def _describe(exc: ValidationError, source: Mapping[str, str]) -> str:
    lines = []
    for problem in field_errors(exc):
        field = problem.field
        if field:
            var = source.get(field, ENV_PREFIX + field.upper())
            where = f"{var} ({field})"
        else:
            where = "configuration"
        got = f" (got {problem.value!r})" if problem.has_value and field in source else ""
        lines.append(f"{where}: {problem.reason}{got}")
    return "invalid configuration: " + "; ".join(lines)
