"""The operator's Prometheus registry and the bookkeeping every kind's series share: each object's
series set from its status at once, and removed with it.

A registry of its own (not the process-global one). Counters and histograms export no ``_created``
series: prometheus_client adds one per child by default, a second series per label set that no
panel or rule reads (and Prometheus' own created-timestamp handling does not need it).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, disable_created_metrics

# A process-wide switch of prometheus_client, read at every scrape; the operator's process
# serves only this registry.
disable_created_metrics()  # type: ignore[no-untyped-call]
REGISTRY = CollectorRegistry(auto_describe=True)

# Which label values each object has series under, so removal takes away exactly those.
Key = tuple[str, str]  # (namespace, name) of a benchmark or a sweep
Series = set[tuple[Gauge, tuple[str, ...]]]
Value = tuple[Gauge, tuple[str, ...], float]
StatusPath = tuple[str, ...]  # the status keys down to a figure
_lock = threading.Lock()


def publish(owned: dict[Key, Series], key: Key, values: list[Value]) -> None:
    """Set ``values`` as the series of one object; its series not among them are removed (a
    backend change, a re-created benchmark, must not leave the old ones behind)."""
    fresh = {(gauge, labels) for gauge, labels, _ in values}
    with _lock:
        for gauge, labels in owned.get(key, set()) - fresh:
            _remove(gauge, labels)
        for gauge, labels, value in values:
            gauge.labels(*labels).set(value)
        owned[key] = fresh


def drop(owned: dict[Key, Series], key: Key) -> None:
    """Remove every series of one object (it was deleted)."""
    with _lock:
        for gauge, labels in owned.pop(key, set()):
            _remove(gauge, labels)


def _remove(gauge: Gauge, labels: tuple[str, ...]) -> None:
    with suppress(KeyError):  # already gone
        gauge.remove(*labels)


def at(status: Mapping[str, Any], path: StatusPath) -> float | None:
    """The number at ``path`` in the status, if every step is there."""
    *blocks, key = path
    holder: Any = status
    for block in blocks:
        holder = holder.get(block) if isinstance(holder, Mapping) else None
    return number(holder, key)


def number(mapping: Any, key: str) -> float | None:
    """``mapping[key]`` when it is a number (a bool is a 0 or 1 here); None otherwise."""
    if isinstance(mapping, Mapping) and isinstance(mapping.get(key), int | float):
        return float(mapping[key])
    return None
