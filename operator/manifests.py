"""YAML for manifests: safe loading, stable block-style dumping, multi-document streams."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """Block style, keys in insertion order, and lists indented under their key as kubectl does."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        # A value used twice (a schema inlined at two places) is written out twice: a manifest
        # a person reads, or a tool that does not resolve them, never meets &id001 / *id001.
        return True


def dump(obj: Any) -> str:
    text: str = yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
    return text


def dump_all(objects: Iterable[Any]) -> str:
    return "".join(f"---\n{dump(obj)}" for obj in objects)


def load_all(text: str) -> list[Any]:
    """Every non-empty document of a YAML stream (raises yaml.YAMLError on bad YAML)."""
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


# Bounds on what a manifest file may hold, checked while parsing, before anything is built: the API
# server takes requests of at most 3 MiB, and nothing a benchmark needs nests deeper than a few
# levels (a 100,000-deep list took 91 s to fail with a RecursionError; 800,000 small documents
# did not finish in 120 s).
MAX_BYTES = 3 * 1024**2
MAX_DOCUMENTS = 1000
MAX_DEPTH = 64
WHAT = "a manifest file"  # how a bound's message names what it bounds


class ManifestError(ValueError):
    """A manifest refused before it is built: too big, too deep, anchors, or a key set twice."""


class _NoDuplicates(yaml.SafeLoader):
    """YAML's own rule, which PyYAML does not enforce: a key appears once in a mapping (last-wins
    hid `worldSize: 999999` under a later `worldSize: 2`)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise ManifestError(f"line {line}: key {key!r} is set twice in one mapping")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_plain(text: str) -> list[Any]:
    """Like :func:`load_all`, but first refuses, from the parser's events alone: more than
    :data:`MAX_BYTES` or :data:`MAX_DOCUMENTS`, nesting deeper than :data:`MAX_DEPTH`, and anchors
    and aliases (a few hundred bytes of nested aliases expand to gigabytes); then a key set twice.
    """
    size = len(text.encode())
    if size > MAX_BYTES:
        raise ManifestError(f"{size} bytes: {WHAT} may hold at most {MAX_BYTES} bytes")
    depth = documents = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        line = event.start_mark.line + 1 if event.start_mark else 0
        anchor = getattr(event, "anchor", None)
        if isinstance(event, yaml.AliasEvent) or anchor:
            kind = "alias" if isinstance(event, yaml.AliasEvent) else "anchor"
            raise ManifestError(
                f"line {line}: YAML {kind} {anchor!r}: anchors and aliases are not "
                "accepted in benchmark manifests; write the values out"
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ManifestError(f"line {line}: nested deeper than {MAX_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > MAX_DOCUMENTS:
                raise ManifestError(f"line {line}: more than {MAX_DOCUMENTS} documents")
    return [doc for doc in yaml.load_all(text, Loader=_NoDuplicates) if doc is not None]
