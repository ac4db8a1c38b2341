"""A rule that spans fields, declared once for everyone who enforces it.

A :class:`Rule` holds the CEL the API server runs (the CRD carries it), its Python twin (the rank's
config, the operator and ``ckptbench render`` run it) and one message. The message names fields by
their Python names in ``{braces}``; each audience renders them its own way: camelCase for the CRD
and the CR's refusals (:attr:`Rule.message`), snake_case for the rank's config, whose errors say
``field: reason`` (:meth:`Rule.refusal`). The rules on the benchmark's settings sit next to the
declarations they read (``settings.py``, ``state_settings.py``, ``storage_settings.py``); the CR's
own rules (its pods, its volumes) are the operator's (``operator/spec/rules.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from string import Formatter
from typing import Any, Generic, TypeVar

from pydantic.alias_generators import to_camel

# A rule written for a class applies to its subclasses: a rule on StorageSettings is a rule on
# BenchmarkSettings, and both are rules on the CR's spec.
Checked = TypeVar("Checked", contravariant=True)


class _Names(dict[str, str]):
    def __init__(self, name: Callable[[str], str]) -> None:
        super().__init__()
        self._name = name

    def __missing__(self, key: str) -> str:
        return self._name(key)


@dataclass(frozen=True)
class Rule(Generic[Checked]):
    """One cross-field rule. ``field``: the Python name of the field it is about (the CRD's
    ``fieldPath``, the config error's field). ``reason``: what follows the field's name in the
    message, other fields named as ``{python_name}``. ``cel`` reads the CR's camelCase fields
    (``self.worldSize``); ``check`` is true when the object keeps the rule."""

    field: str
    cel: str
    reason: str
    check: Callable[[Checked], bool]

    def text(self, name: Callable[[str], str]) -> str:
        """The reason with its fields named by ``name`` (``to_camel``, or as they are)."""
        return self.reason.format_map(_Names(name))

    @property
    def named(self) -> tuple[str, ...]:
        """The fields the message names: this rule's own, then the ones in its reason."""
        inner = [f for _, f, _, _ in Formatter().parse(self.reason) if f]
        return tuple(dict.fromkeys([self.field, *inner]))

    @property
    def message(self) -> str:
        """The message as the CRD and the CR's refusals say it: camelCase, field first."""
        return f"{to_camel(self.field)} {self.text(to_camel)}"

    def to_crd(self) -> dict[str, str]:
        return {"rule": self.cel, "message": self.message, "fieldPath": f".{to_camel(self.field)}"}

    def refusal(self, values: object) -> str:
        """The message as the rank's config says it: ``field: reason`` in snake_case, with the
        values of the fields it names (read from ``values``)."""
        return self.broken(values).say(str)

    def broken(self, values: object) -> Broken:
        """The error a validator raises when ``values`` break this rule: it keeps the rule, so
        whoever reports it can name the fields its own way (``ckptbench run``: its options)."""
        return Broken(self, {name: getattr(values, name) for name in self.named})


class Broken(ValueError):
    """A :class:`Rule` broken by some values; its text is the snake_case :meth:`Rule.refusal`."""

    def __init__(self, rule: Rule[Any], values: dict[str, object]) -> None:
        self.rule, self.values = rule, values
        super().__init__(self.say(str))

    def say(self, name: Callable[[str], str]) -> str:
        """``field: reason (got field=value, ...)``, every field named by ``name``."""
        got = ", ".join(f"{name(field)}={_shown(value)}" for field, value in self.values.items())
        return f"{name(self.rule.field)}: {self.rule.text(name)} (got {got})"


def _shown(value: object) -> str:
    return str(value.value) if isinstance(value, enum.Enum) else repr(value)
