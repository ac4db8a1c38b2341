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
