"""YAML for manifests: safe loading, stable block-style dumping, multi-document streams."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """Block style, keys in insertion order, and lists indented under their key as kubectl does."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def dump(obj: Any) -> str:
    text: str = yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
    return text


def dump_all(objects: Iterable[Any]) -> str:
    return "".join(f"---\n{dump(obj)}" for obj in objects)


def load_all(text: str) -> list[Any]:
    """Every non-empty document of a YAML stream (raises yaml.YAMLError on bad YAML)."""
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


class AliasError(ValueError):
    """A YAML stream uses anchors or aliases, which ``load_plain`` refuses."""


def load_plain(text: str) -> list[Any]:
    """Like :func:`load_all`, but refuses anchors and aliases before anything is built: a few
    hundred bytes of nested aliases expand to gigabytes (and hashing a spec expands them)."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        anchor = getattr(event, "anchor", None)
        if isinstance(event, yaml.AliasEvent) or anchor:
            kind = "alias" if isinstance(event, yaml.AliasEvent) else "anchor"
            line = event.start_mark.line + 1 if event.start_mark else 0
            raise AliasError(
                f"line {line}: YAML {kind} {anchor!r}: anchors and aliases are not "
                "accepted in benchmark manifests; write the values out"
            )
    return load_all(text)
