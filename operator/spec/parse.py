"""Validating a spec into its model, with errors that name each bad field (spec.<field>)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.spec.policy import CONTEXT_KEY, Policy


class SpecError(ValueError):
    """A CheckpointBenchmark spec is invalid; the message names each bad field (spec.<field>)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


_Spec = TypeVar("_Spec", bound=BaseModel)


def parse_spec(raw: object, policy: Policy | None = None) -> CheckpointBenchmarkSpec:
    """Validate ``raw`` (the object's ``spec``) or raise :class:`SpecError`; never anything else.

    With ``policy``, the admin's allow-lists are checked too (each refusal names its field)."""
    return parse_model(CheckpointBenchmarkSpec, raw, policy)


def parse_model(model: type[_Spec], raw: object, policy: Policy | None = None) -> _Spec:
    """:func:`parse_spec` for any kind's spec ``model`` (the DataLoadingBenchmark's too)."""
    if isinstance(raw, Mapping) and not isinstance(raw, dict):
        raw = dict(raw)  # kopf hands the spec over as a read-only mapping view; strict wants dict
    try:
        context = {CONTEXT_KEY: policy} if policy is not None else None
        return model.model_validate(raw, context=context)
    except ValidationError as exc:
        raise SpecError([_describe(error) for error in exc.errors()]) from None


# What a pattern means, instead of the regular expression itself.
_DNS_HINT = "must be lowercase letters, digits, '-' and '.' (a DNS subdomain)"
_PATTERN_HINTS = {
    "checkpointPath": "must be gs://<bucket>[/<prefix>] (a valid bucket name) or an absolute "
    "path, without whitespace",
    "dataPath": "must be gs://<bucket>[/<prefix>], s3://<bucket>[/<prefix>] (a valid bucket "
    "name) or an absolute path, without whitespace",
    "project": "must be a GCP project id (letters, digits, '.', ':', '_', '-')",
    "image": "must be an image reference without whitespace",
    "serviceAccountName": _DNS_HINT,
    "queueName": _DNS_HINT,
    "workloadPriorityClassName": _DNS_HINT,
    "priorityClassName": _DNS_HINT,
}


def _describe(error: ErrorDetails) -> str:
    path = "spec"
    for part in error["loc"]:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "value_error" and not error["loc"]:
        # Cross-field rules start with the field they are about.
        return f"{path}.{message}"
    if message.startswith("["):
        return f"{path}{message}"
    if error["type"] == "string_pattern_mismatch" and error["loc"]:
        message = _PATTERN_HINTS.get(str(error["loc"][-1]), message)
    value = error.get("input")
    got = ""
    if isinstance(value, str | int | float | bool) or value is None:
        got = f" (got {value!r:.80})"
    return f"{path}: {message}{got}"
