"""What the benchmark and the sweep kopf registrations share: the reconciler ``main`` leaves in
kopf's memo, the namespace every handler needs, the watch of a kind's spec and of its deletion."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import kopf

from ckptbench.operator.spec import names

Handler = TypeVar("Handler", bound=Callable[..., Any])


class Closable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


@dataclass(frozen=True)
class Watched(Generic[C]):
    """One of our kinds as its handlers see it: the reconciler ``main`` leaves in kopf's memo
    under ``memo_key``, and the namespace every event of it must have."""

    memo_key: str
    reconciler: type[C]
    namespaced: str  # the error when an event comes without a namespace

    def of(self, memo: Any) -> C:
        value = memo.get(self.memo_key)
        if not isinstance(value, self.reconciler):
            raise kopf.PermanentError(
                f"the operator was started without a {self.reconciler.__name__} in its memo "
                f"({self.memo_key!r})"
            )
        return value

    def namespace(self, namespace: str | None) -> str:
        if not namespace:
            raise kopf.PermanentError(self.namespaced)
        return namespace

    def close_on_cleanup(self) -> None:
        """Register a cleanup handler that stops the reconciler's background work."""

        async def close(memo: Any, **_: Any) -> None:
            await self.of(memo).close()

        kopf.on.cleanup(id=f"close-{self.memo_key}")(close)


def on_spec_change(plural: str, id: str | None = None) -> Callable[[Handler], Handler]:
    """Register a handler for one of our kinds created, resumed (an operator restart) or its spec
    edited; kopf retries a handler that raised, with backoff. ``id``: kopf's handler id, the
    function's qualified name when None (the update handler's gets ``/spec`` after it)."""

    def register(handler: Handler) -> Handler:
        # kopf's decorators register the function and hand it back unchanged.
        kopf.on.update(names.GROUP, names.VERSION, plural, field="spec", id=id)(handler)
        kopf.on.create(names.GROUP, names.VERSION, plural, id=id)(handler)
        kopf.on.resume(names.GROUP, names.VERSION, plural, id=id)(handler)
        return handler

    return register


def deleted(event: kopf.RawEvent) -> str | None:
    """The uid of the object a watch event reports deleted ("" when it has none); None for any
    other event."""
    if event.get("type") != "DELETED":
        return None
    return str(((event.get("object") or {}).get("metadata") or {}).get("uid", ""))
