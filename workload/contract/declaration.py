"""What a setting's declaration carries beside its pydantic field: the :class:`Setting` metadata.

Every declaring class (:class:`~ckptbench.workload.contract.storage_settings.StorageSettings`,
:class:`~ckptbench.workload.contract.state_settings.StateSettings` which extends it, and
:class:`~ckptbench.workload.contract.settings.BenchmarkSettings` which extends that) puts one
:class:`Setting` in each field's ``Annotated``; ``settings.declared()`` reads them all. The rules
that span fields are declared beside each class (``rule.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo


class Placed(Protocol):
    """What says where a setting acts: the backend (a checkpoint backend or a data reader, named
    alike) and, for a checkpoint, the model preset (None: the reference layout)."""

    @property
    def backend(self) -> enum.Enum: ...


_UNSET: Any = object()


@dataclass(frozen=True)
class Setting:
    """What a setting's pydantic field cannot say: how people reach it and compare with it.

    ``unit``: what a number counts; ``bytes`` also makes the option take sizes (``32MiB``).
    ``flag``: the ``ckptbench run`` option (default: ``--`` and the name with dashes); a boolean's
    flag is a switch that sets the opposite of its default. ``local_default``: the default of
    ``ckptbench run`` where a laptop needs a smaller one than a cluster (the spec's and the
    rank's default otherwise). ``axis``: a sweep may vary it (``ckptbench run`` with a comma
    list; a CheckpointBenchmarkSweep's axes and cells). ``runner``: the option is the local
    runner's own, which sets the field itself (``--storage`` also starts an emulator or not).
    ``backends`` and ``layout``: where the setting acts (empty: everywhere); a result records a
    setting only where it acted, so a gcsfs row shows no gcs thread count. ``recorded_in``: the
    setting another one resolves it into; a result records only that one (asyncSave is
    recorded as the save mode it means, not beside it). ``switch``: the help of a switch that
    turns a true default off, which does the opposite of what the description says.
    ``options_prefix``: the field holds a group of settings declared in a class of their own
    (the loader's, ``data_loading``); each of them is its own option, its flag behind this prefix
    (``--data-batch-size``), and the group is set when any of them is given.
    """

    unit: str | None = None
    flag: str | None = None
    local_default: Any = _UNSET
    axis: bool = False
    metavar: str | None = None
    runner: bool = False
    backends: tuple[str, ...] = ()
    layout: str | None = None  # "model" or "reference": acts only with that layout
    recorded_in: str | None = None
    switch: str | None = None
    options_prefix: str | None = None

    def acts_in(self, settings: Placed) -> bool:
        if self.backends and settings.backend.value not in self.backends:
            return False
        if self.layout is not None:
            model = getattr(settings, "model", None)
            return self.layout == ("model" if model is not None else "reference")
        return True

    def has_local_default(self) -> bool:
        return self.local_default is not _UNSET


def no_crd_default(schema: dict[str, Any]) -> None:
    """Leave a field's default out of the CRD schema (pydantic still applies it): CEL can then
    tell a spec that sets the field from one that does not (``has(self.layerSize)``)."""
    schema.pop("default", None)


def choice(default: Any, description: str) -> Any:
    """A field holding one of an enum's values, or its value as the plain string a manifest or
    a variable holds (a strict enum would refuse it)."""
    return Field(default, strict=False, description=description)


@dataclass(frozen=True)
class Declared:
    """One declared setting: its field name, pydantic's field, and its :class:`Setting`."""

    name: str
    field: FieldInfo
    setting: Setting
    owner: type[BaseModel]  # the settings class whose body declares it (its room)

    @property
    def flag(self) -> str:
        return self.setting.flag or "--" + self.name.replace("_", "-")

    @property
    def annotation(self) -> Any:
        return self.field.annotation


def declared_fields(model: type[BaseModel], first_from: type[BaseModel]) -> Iterator[Declared]:
    """The settings ``model`` declares, each with its :class:`Setting`: its own fields first, in
    declaration order, then those it inherits from ``first_from`` (pydantic lists a parent's
    fields first; a benchmark's own settings lead). A field with no :class:`Setting` is a bug."""
    fields = model.model_fields
    inherited = set(first_from.model_fields)
    names = [n for n in fields if n not in inherited] + [n for n in fields if n in inherited]
    for name in names:
        info = fields[name]
        setting = next((m for m in info.metadata if isinstance(m, Setting)), None)
        if setting is None:
            raise TypeError(f"{name}: a benchmark setting needs its Setting metadata")
        owner = next(c for c in model.__mro__ if name in vars(c).get("__annotations__", {}))
        yield Declared(name, info, setting, owner)
