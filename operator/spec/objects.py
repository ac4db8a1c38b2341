"""The Kubernetes objects a spec embeds (volumes, their mounts, tolerations): how the model
declares them and the checks each item passes, so a bad one is refused naming its index and key
before anything is rendered."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field

from ckptbench.operator.spec.names import (
    DNS_SUBDOMAIN,
    MAX_LIST_ITEMS,
    PARENT_STEP,
    TAINT_EFFECTS,
    TOLERATION_KEYS,
    TOLERATION_OPERATORS,
    VOLUME_KEYS,
    VOLUME_MOUNT_KEYS,
    VOLUME_SOURCES,
    check_dns_label,
)
from ckptbench.operator.spec.schemas import crd_schema

_VOLUME_KIND_REFUSED = (
    "volume kind not allowed: benchmark pods run under the restricted Pod Security profile and "
    "may mount only"
)
# Keys of a volume mount or toleration with the type each must have: (type, as said in the error).
_MOUNT_TYPES = {
    "readOnly": (bool, "true or false"),
    "subPath": (str, "a string"),
    "subPathExpr": (str, "a string"),
}
_TOLERATION_TEXT = {"key": (str, "a string"), "value": (str, "a string")}


def optional_name(max_length: int, description: str, pattern: str = DNS_SUBDOMAIN) -> Any:
    """An optional name: by default of a Kubernetes object the pods refer to (a DNS subdomain)."""
    return Field(
        None, min_length=1, max_length=max_length, pattern=pattern, description=description
    )


def object_list(schema: dict[str, Any], description: str) -> Any:
    """A bounded list of Kubernetes objects, each described to the CRD by ``schema``."""
    return Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description=description,
        json_schema_extra=crd_schema(schema),
    )


def _only_keys(item: dict[str, Any], allowed: tuple[str, ...], where: str, why: str) -> None:
    """Refuse the first key of ``item`` not in ``allowed``, naming it."""
    for key in item:
        if key not in allowed:
            listed = [k for k in allowed if k != "name"]
            raise ValueError(f"{where}.{key}: {why} {', '.join(listed)}")


def _typed(item: dict[str, Any], where: str, types: Mapping[str, tuple[type, str]]) -> None:
    """Refuse the first key of ``types`` that ``item`` sets to a value of another type (true and
    false are no integers here, though Python counts them as such)."""
    for key, (kind, said) in types.items():
        if key in item:
            found = item[key]
            if not isinstance(found, kind) or (isinstance(found, bool) and kind is not bool):
                raise ValueError(f"{where}.{key}: must be {said}")


def check_volume(volume: dict[str, Any], where: str) -> None:
    _only_keys(volume, VOLUME_KEYS, where, _VOLUME_KIND_REFUSED)
    check_dns_label(volume.get("name"), f"{where}.name")
    _typed(volume, where, dict.fromkeys(VOLUME_SOURCES, (dict, "an object")))
    for source in ("configMap", "secret"):
        items = (volume.get(source) or {}).get("items") or []
        for index, item in enumerate(items if isinstance(items, list) else []):
            path = item.get("path") if isinstance(item, dict) else None
            if isinstance(path, str) and re.search(PARENT_STEP, path):
                raise ValueError(
                    f"{where}.{source}.items[{index}].path: must be a relative path without "
                    f"'..' (got {path!r}): a projected file may not land outside its volume"
                )


def check_mount(mount: dict[str, Any], where: str) -> None:
    _only_keys(mount, VOLUME_MOUNT_KEYS, where, "a mount may set only")
    check_dns_label(mount.get("name"), f"{where}.name")
    mount_path = mount.get("mountPath")
    if not isinstance(mount_path, str) or not mount_path.startswith("/"):
        raise ValueError(f"{where}.mountPath: must be an absolute path")
    _typed(mount, where, _MOUNT_TYPES)


def check_toleration(toleration: dict[str, Any], where: str) -> None:
    _only_keys(toleration, TOLERATION_KEYS, where, "a toleration may set only")
    _typed(toleration, where, _TOLERATION_TEXT)
    for key, allowed in (("operator", TOLERATION_OPERATORS), ("effect", TAINT_EFFECTS)):
        if key in toleration and toleration[key] not in allowed:
            raise ValueError(
                f"{where}.{key}: must be one of {', '.join(allowed)}, got {toleration[key]!r}"
            )
    _typed(toleration, where, {"tolerationSeconds": (int, "an integer")})


# The check of each item of a spec field holding a list of Kubernetes objects.
ITEM_CHECKS: dict[str, Callable[[dict[str, Any], str], None]] = {
    "volumes": check_volume,
    "volume_mounts": check_mount,
    "tolerations": check_toleration,
}
