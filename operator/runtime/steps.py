"""The steps a benchmark's and a sweep's reconcile both take: read the object, unless it is gone,
and patch its status only when it changed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ckptbench.operator.spec.status_schema import status_body

Get = Callable[[str, str], dict[str, Any] | None]
Forget = Callable[[str, str], None]
PatchStatus = Callable[[str, str, Mapping[str, Any]], None]


@dataclass(frozen=True)
class Live:
    """An object as a reconcile read it: itself, its metadata, uid and last written status."""

    obj: dict[str, Any]
    meta: dict[str, Any]
    uid: str
    status: dict[str, Any]


def read_live(get: Get, forget: Forget, namespace: str, name: str) -> Live | None:
    """The object, or None when it is gone or being deleted: ``forget`` drops its series then."""
    obj = get(namespace, name)
    meta: dict[str, Any] = (obj or {}).get("metadata") or {}
    if obj is None or meta.get("deletionTimestamp"):
        forget(namespace, name)
        return None
    return Live(obj, meta, str(meta.get("uid", "")), obj.get("status") or {})


def patch_if_changed(
    patch: PatchStatus,
    namespace: str,
    name: str,
    previous: Mapping[str, Any],
    status: BaseModel,
) -> tuple[dict[str, Any], bool]:
    """Patch the status subresource when ``status`` differs from ``previous``; a key ``status``
    no longer has is removed (None, in a JSON merge patch). The status is dumped here, once:
    returns that body (what the object's status now is) and whether a patch was sent."""
    body = status_body(status)
    if body == previous:
        return body, False
    removed = {key: None for key in previous if key not in body}
    patch(namespace, name, {**body, **removed})
    return body, True
