"""Check a Grafana dashboard JSON against Grafana's own published types, without a Grafana.

The types are those of the ``grafana-foundation-sdk`` package (Grafana's Python SDK, generated
from the schemas Grafana itself publishes: the dashboard kind, each panel plugin's options and
field config, each data source's query). The SDK's ``from_json`` neither refuses unknown keys nor
checks types, so two checks stand in for a validator:

- :func:`dropped_keys`: the dashboard is read into the SDK's models and written back; a key the
  models do not know (a misspelt ``gridPos``, an option the panel type does not have) is lost
  on the way and named here;
- :func:`type_errors`: every value the models hold is checked against their type annotations
  (enums and literals included: a ``graphTooltip`` of 7 or a legend ``displayMode`` of "grid").
"""

from __future__ import annotations

import enum
import json
import types
import typing
from typing import Any

from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.cog.runtime import Runtime, UnknownDataquery
from grafana_foundation_sdk.models.dashboard import Dashboard

register_default_plugins()


def read(data: dict[str, Any]) -> Dashboard:
    """The dashboard as the SDK's models (panel options and queries typed by plugin)."""
    return Dashboard.from_json(data)


def written(dashboard: Dashboard) -> Any:
    return json.loads(json.dumps(dashboard, cls=JSONEncoder))


def dropped_keys(original: Any, again: Any, path: str = "") -> list[str]:
    """Paths of the keys of ``original`` that are missing from ``again`` (or whose value
    changed): what the SDK's models did not keep."""
    if isinstance(original, dict):
        if not isinstance(again, dict):
            return [f"{path or '.'}: became {type(again).__name__}"]
        found = []
        for key, value in original.items():
            where = f"{path}.{key}"
            if key not in again:
                found.append(where)
            else:
                found += dropped_keys(value, again[key], where)
        return found
    if isinstance(original, list):
        if not isinstance(again, list) or len(again) != len(original):
            return [f"{path}: list changed"]
        return [
            e
            for i, item in enumerate(original)
            for e in dropped_keys(item, again[i], f"{path}[{i}]")
        ]
    return [] if original == again else [f"{path}: {original!r} became {again!r}"]


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and callable(getattr(tp, "from_json", None))


def _check(value: Any, tp: Any, path: str) -> list[str]:
    if tp is Any or tp is object:
        # Panel options and custom field config are typed `object` on the panel, and hold the
        # panel plugin's own model (timeseries.Options, ...) when the SDK knows the plugin.
        return type_errors(value, path) if _is_model(type(value)) else []
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return []
        failures = [_check(value, arg, path) for arg in args if arg is not type(None)]
        return [] if any(not f for f in failures) else min(failures, key=len)
    if origin is typing.Literal:
        return [] if value in args else [f"{path}: {value!r} is not one of {list(args)}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: expected a list, got {value!r}"]
        return [e for i, item in enumerate(value) for e in _check(item, args[0], f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: expected an object, got {value!r}"]
        return [e for k, item in value.items() for e in _check(item, args[1], f"{path}.{k}")]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        allowed = [member.value for member in tp]
        return [] if value in allowed else [f"{path}: {value!r} is not one of {allowed}"]
    if tp is cogvariants.Dataquery:
        if isinstance(value, UnknownDataquery):
            return [f"{path}: a query of no data source type the SDK knows"]
        return type_errors(value, path)
    if _is_model(tp):
        if isinstance(value, dict):  # some from_json keep nested parts as plain JSON
            value = tp.from_json(value)
        if not isinstance(value, tp):
            return [f"{path}: expected {tp.__name__}, got {value!r}"]
        return type_errors(value, path)
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(tp, type):
        ok = isinstance(value, tp)
    else:
        return []  # a construct of typing this checker does not read
    return [] if ok else [f"{path}: expected {tp.__name__}, got {value!r}"]


def type_errors(model: Any, path: str = "") -> list[str]:
    """Each attribute of an SDK model (and of the models in it) against its annotation."""
    hints = typing.get_type_hints(type(model))
    return [
        e for name, tp in hints.items() for e in _check(getattr(model, name), tp, f"{path}.{name}")
    ]


def panels(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel of a dashboard's JSON, those inside (collapsed) rows included."""
    found = []
    for panel in data.get("panels", []):
        found.append(panel)
        found += panel.get("panels", [])
    return found


def unknown_panel_types(data: dict[str, Any]) -> list[str]:
    known = set(Runtime().panelcfg_variants) | {"row"}
    return [
        f"panel {p.get('title')!r}: type {p.get('type')!r} is no Grafana panel plugin"
        for p in panels(data)
        if p.get("type") not in known
    ]


def problems(data: dict[str, Any]) -> list[str]:
    """Every way ``data`` departs from Grafana's dashboard types; empty when it fits."""
    dashboard = read(data)
    unknown = [f"{p}: not in Grafana's schema" for p in dropped_keys(data, written(dashboard))]
    return unknown + unknown_panel_types(data) + type_errors(dashboard)
