"""What the benchmark and the sweep kopf registrations share: the watch of one of our kinds, the
namespace every handler needs, and the reconciler ``main`` leaves in kopf's memo."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import kopf

from ckptbench.operator.spec import names

T = TypeVar("T")
Handler = TypeVar("Handler", bound=Callable[..., Any])


def namespaced(namespace: str | None, why: str) -> str:
    """The namespace of an event; our kinds are namespaced, so none is a permanent error."""
    if not namespace:
        raise kopf.PermanentError(why)
    return namespace


def from_memo(memo: Any, key: str, kind: type[T]) -> T:
    """The ``kind`` object ``main`` put in kopf's memo under ``key``."""
    value = memo.get(key)
    if not isinstance(value, kind):
        raise kopf.PermanentError(
            f"the operator was started without a {kind.__name__} in its memo ({key!r})"
        )
    return value


def on_spec_change(plural: str) -> Callable[[Handler], Handler]:
    """Register a handler for one of our kinds created, resumed (an operator restart) or its spec
    edited; kopf retries a handler that raised, with backoff."""

    def register(handler: Handler) -> Handler:
        # kopf's decorators register the function and hand it back unchanged.
        kopf.on.update(names.GROUP, names.VERSION, plural, field="spec")(handler)
        kopf.on.create(names.GROUP, names.VERSION, plural)(handler)
        kopf.on.resume(names.GROUP, names.VERSION, plural)(handler)
        return handler

    return register


def deleted(event: kopf.RawEvent) -> str | None:
    """The uid of the object a watch event reports deleted ("" when it has none); None for any
    other event."""
    if event.get("type") != "DELETED":
        return None
    return str(((event.get("object") or {}).get("metadata") or {}).get("uid", ""))
