"""Check objects the way an API server with the generated CRD would, without an API server.

- :func:`schema_errors`: the openAPIV3Schema with jsonschema, closed to unknown fields the way
  ``kubectl``'s strict field validation rejects them (the API server would otherwise prune them).
- :func:`cel_failures`: the CEL rules (``x-kubernetes-validations``) evaluated by cel-python on
  the object after the schema's defaults are applied, as the API server evaluates them.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import celpy
import jsonschema
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from ckptbench.operator.spec.crd import build_crd


def openapi_schema(crd: dict[str, Any] | None = None) -> dict[str, Any]:
    """The CRD's schema; by default the CheckpointBenchmark's."""
    source = crd if crd is not None else build_crd()
    schema: dict[str, Any] = source["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _kind(crd: dict[str, Any] | None) -> str:
    return "" if crd is None else str(crd["metadata"]["name"])


_CRDS: dict[str, dict[str, Any]] = {}


def _crd_of(kind: str) -> dict[str, Any] | None:
    return _CRDS.get(kind)


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` in which objects with declared properties reject undeclared ones."""
    out = copy.deepcopy(schema)

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(out)
    return out


@functools.cache
def _validator(kind: str = "") -> jsonschema.Draft4Validator:
    # OpenAPI v3.0 schemas use draft-4 semantics (boolean exclusiveMinimum).
    return jsonschema.Draft4Validator(closed(openapi_schema(_crd_of(kind))))


def schema_errors(obj: dict[str, Any], crd: dict[str, Any] | None = None) -> list[str]:
    """``path: message`` for every schema violation of the whole ``obj`` (by default a
    CheckpointBenchmark; pass another ``crd`` for its kind)."""
    if crd is not None:
        _CRDS.setdefault(_kind(crd), crd)
    validator = _validator(_kind(crd))
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    return [
        ".".join(str(part) for part in error.absolute_path) + ": " + error.message
        for error in errors
    ]


def with_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` with the schema's defaults filled in, as the API server does before CEL runs."""
    if isinstance(value, dict) and "properties" in schema:
        out = dict(value)
        for name, child in schema["properties"].items():
            if name not in out and "default" in child:
                out[name] = copy.deepcopy(child["default"])
            if name in out:
                out[name] = with_defaults(out[name], child)
        return out
    if isinstance(value, list) and "items" in schema:
        return [with_defaults(item, schema["items"]) for item in value]
    return value


def _rules_at(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, str]]]:
    found = [(path, rule) for rule in schema.get("x-kubernetes-validations", [])]
    for name, child in schema.get("properties", {}).items():
        found += _rules_at(child, f"{path}.{name}" if path else name)
    return found


@functools.cache
def _programs(kind: str = "") -> list[tuple[str, dict[str, str], Any]]:
    env = celpy.Environment()
    return [
        (path, rule, env.program(env.compile(rule["rule"])))
        for path, rule in _rules_at(openapi_schema(_crd_of(kind)), "")
    ]


def _at(obj: Any, path: str) -> Any:
    for part in filter(None, path.split(".")):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def is_transition_rule(rule: dict[str, str]) -> bool:
    """A rule that reads ``oldSelf``: the API server runs it on updates only."""
    return "oldSelf" in rule["rule"]


def cel_failures(
    obj: dict[str, Any], crd: dict[str, Any] | None = None, old: dict[str, Any] | None = None
) -> list[str]:
    """``<path><fieldPath>: <message>`` for every CEL rule the CheckpointBenchmark ``obj`` breaks.

    ``old`` makes it an update from that object: transition rules (``oldSelf``) run too, where
    the old object has a value at the rule's path, as on an API server; without it, a create.
    Objects the schema already rejects are not meaningful here (the API server stops earlier)."""
    if crd is not None:
        _CRDS.setdefault(_kind(crd), crd)
    schema = openapi_schema(_crd_of(_kind(crd)))
    defaulted = with_defaults(obj, schema)
    old_defaulted = with_defaults(old, schema) if old is not None else None
    failures = []
    for path, rule, program in _programs(_kind(crd)):
        target = _at(defaulted, path)
        if target is None:
            continue
        activation = {"self": json_to_cel(target)}
        if is_transition_rule(rule):
            previous = _at(old_defaulted, path) if old_defaulted is not None else None
            if previous is None:
                continue
            activation["oldSelf"] = json_to_cel(previous)
        try:
            result = program.evaluate(activation)
        except CELEvalError as exc:
            result = exc
        # An evaluation error rejects the object on an API server too.
        if isinstance(result, Exception) or not bool(result):
            where = (path + rule.get("fieldPath", "")).lstrip(".")
            failures.append(f"{where}: {rule['message']}" if where else rule["message"])
    return failures
