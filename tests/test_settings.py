"""Every declared setting reaches every place a user meets it, from its one declaration.

Walks ``contract/settings.py``: each setting must be a field of the CRD (name, description,
bounds), a ``CKPTBENCH_*`` variable the rank parses, an option of ``ckptbench run`` that sets it,
and a recorded setting in the JSON and CSV a run writes. A setting added without one of them fails
here, naming it.
"""

from __future__ import annotations

import csv
import enum
import io
import json
import typing
from pathlib import Path
from typing import Any

import annotated_types
import pytest
from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from ckptbench.operator.spec.crd import build_crd
from ckptbench.operator.spec.model import CheckpointBenchmarkSpec
from ckptbench.operator.sweep.cells import axis_fields
from ckptbench.workload.contract import settings
from ckptbench.workload.contract.choices import Backend, Procedure
from ckptbench.workload.contract.config import ENV_PREFIX, ConfigError, WorkloadConfig
from ckptbench.workload.contract.data.choices import Reader
from ckptbench.workload.contract.data.settings import LoaderSettings
from ckptbench.workload.contract.results.summaries import RunSummary
from ckptbench.workload.contract.settings import Declared
from ckptbench.workload.local import cli
from ckptbench.workload.local.options import OPTION_OF, UsageError, build_parser, option
from ckptbench.workload.local.outputs import csvfile
from ckptbench.workload.local.plan import plan

DECLARED = list(settings.declared())
IDS = [d.name for d in DECLARED]
# Settings that only exist to be refused by name (a CPU node cannot honour them): no other value
# than their default gets through, which test_a_refused_setting_is_refused_everywhere shows.
WALKED = [d for d in DECLARED if d.name not in settings.NEEDS_CUDA]
WALKED_IDS = [d.name for d in WALKED]


def _bounds(d: Declared) -> tuple[Any, Any]:
    low: Any = None
    high: Any = None
    for meta in d.field.metadata:
        if isinstance(meta, annotated_types.Ge):
            low = meta.ge
        if isinstance(meta, annotated_types.Le):
            high = meta.le
    return low, high


def _kind(d: Declared) -> Any:
    args = [a for a in typing.get_args(d.annotation) if a is not type(None)]
    return args[0] if args else d.annotation


def _other_value(d: Declared) -> Any:
    """A valid value that is not the setting's default (nor its laptop default)."""
    kind, default = _kind(d), d.field.default
    taken = {default, d.setting.local_default if d.setting.has_local_default() else None}
    if kind is bool:
        return not default
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return next(m for m in kind if m not in taken and m.value != "multipart")
    if d.name == "model":
        return "gpt2"  # a shipped Hugging Face config, beside the Llama 3 preset of _context
    if d.name == "checkpoint_path":
        return "/tmp/ckptbench-settings"
    if d.name == "project":
        return "my-project-1"
    if d.name == "s3_endpoint":
        return "http://127.0.0.1:9000"
    if d.name == "s3_region":
        return "eu-west-3"
    if d.name == "load_world_size":
        return 1
    if d.name == "data_loading":  # a group of settings: the loader reading where file writes
        return LoaderSettings(backend=Reader.FILE, batch_size=3)
    low, high = _bounds(d)
    value: float = 3 if low is None else low + 2
    while value in taken:
        value += 1
    assert high is None or value <= high, d.name
    return float(value) if kind is float else int(value)


def _context(d: Declared, value: Any) -> dict[str, Any]:
    """Other settings the setting needs to act: its layout and its backend."""
    out: dict[str, Any] = {"world_size": 2}
    if d.setting.layout == "model" or d.name == "model":
        out["model"] = "llama3-debug"
    else:
        out |= {"layer_size": 1000, "padding_size": 4}
    backend = d.setting.backends[0] if d.setting.backends else "file"
    if d.name == "backend":
        backend = value.value
    out["backend"] = backend
    paths = {"": "/tmp/ckptbench-settings", "gs://": "gs://bkt/p", "s3://": "s3://bkt/p"}
    out["checkpoint_path"] = paths[Backend(backend).scheme]
    if d.name.startswith("staging_") or d.name == "stager":
        # DefaultStager's options, and the stager itself: they act on an async save only.
        out |= {"save_mode": "thread", "stager": "default"}
    if d.name == "procedure" and value is Procedure.REFERENCE:
        out["warmup_samples"] = 0
    if d.name == "data_loading":
        out["train_every"] = 4
    out[d.name] = value
    return out


def test_every_setting_is_declared_with_a_description() -> None:
    assert len(DECLARED) >= 30
    for d in DECLARED:
        assert d.field.description, d.name


@pytest.mark.parametrize("d", DECLARED, ids=IDS)
def test_the_setting_is_a_crd_field_with_its_declared_description_and_bounds(d: Declared) -> None:
    crd = build_crd()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    prop = spec["properties"][to_camel(d.name)]
    assert prop["description"] == d.field.description
    low, high = _bounds(d)
    assert prop.get("minimum") == low and prop.get("maximum") == high
    assert (
        to_camel(d.name) in CheckpointBenchmarkSpec.model_json_schema(by_alias=True)["properties"]
    )
    assert (d.name in axis_fields()) == d.setting.axis


@pytest.mark.parametrize("d", WALKED, ids=WALKED_IDS)
def test_the_setting_is_a_variable_the_rank_parses(d: Declared) -> None:
    value = _other_value(d)
    config = WorkloadConfig.model_validate(_context(d, value))
    env = config.to_env()
    var = ENV_PREFIX + d.name.upper()
    assert var in env, var
    assert getattr(WorkloadConfig.from_env(env), d.name) == value


@pytest.mark.parametrize("d", WALKED, ids=WALKED_IDS)
def test_the_setting_is_an_option_of_ckptbench_run(d: Declared, tmp_path: Path) -> None:
    assert OPTION_OF[d.name] == d.flag
    value = _other_value(d)
    raw = _context(d, value)
    storage = raw.pop("checkpoint_path")
    argv = ["--storage", str(tmp_path) if storage.startswith("/") else storage]
    for name, given in raw.items():
        o = option(OPTION_OF[name])
        if name == "checkpoint_path":
            continue
        if isinstance(given, LoaderSettings):  # its settings' own options, behind --data-
            argv += ["--data-backend", given.backend.value, "--data-batch-size", "3"]
            continue
        if o.is_switch:
            if given == o.const:
                argv.append(o.flag)
        else:
            argv += [o.flag, str(getattr(given, "value", given))]
    if d.name == "checkpoint_path":
        value = str(tmp_path)
    config = plan(build_parser().parse_args(argv)).cells[0].config
    if isinstance(value, LoaderSettings):  # the laptop shape fills what was not given
        assert config.data_loading is not None
        assert config.data_loading.backend is value.backend and config.data_loading.batch_size == 3
        return
    assert getattr(config, d.name) == value


@pytest.mark.parametrize("d", WALKED, ids=WALKED_IDS)
def test_the_setting_is_recorded_in_the_json_and_the_csv(d: Declared) -> None:
    value = _other_value(d)
    config = WorkloadConfig.model_validate(_context(d, value))
    recorded = cli.settings(config, None)
    shown = value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, LoaderSettings):
        shown = value.model_dump(mode="json")
    if d.setting.recorded_in is not None:
        # Carried by the setting it resolves into (async_save: the save mode it means).
        assert d.name not in recorded
        assert recorded[d.setting.recorded_in] == config.record()[d.setting.recorded_in]
        return
    assert recorded[d.name] == shown
    if isinstance(value, LoaderSettings):  # a group: one JSON cell in the CSV
        rows = list(csv.DictReader(io.StringIO(csvfile.to_csv([("cell", _summary(config))]))))
        assert json.loads(rows[0][d.name]) == shown
        return
    summary = _summary(config)
    header, row = csvfile.to_csv([("cell", summary)]).splitlines()[:2]
    columns = dict(zip(header.split(","), row.split(","), strict=True))
    assert columns[d.name] == _csv_text(shown)


def _summary(config: WorkloadConfig) -> RunSummary:
    return RunSummary(
        world_size=config.world_size,
        ranks_reported=0,
        total_bytes=config.total_bytes,
        shard_bytes=0,
        extra={"settings": cli.settings(config, None)},
    )


def _csv_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # the JSON's digits
    return "" if value is None else str(value)


@pytest.mark.parametrize("name", sorted(settings.NEEDS_CUDA))
def test_a_refused_setting_is_refused_everywhere(name: str, tmp_path: Path) -> None:
    d = next(d for d in DECLARED if d.name == name)
    context = _context(d, True)
    with pytest.raises(ValidationError, match=name):
        WorkloadConfig.model_validate(context)
    env = WorkloadConfig.model_validate({**context, name: False}).to_env()
    with pytest.raises(ConfigError, match=ENV_PREFIX + name.upper()):
        WorkloadConfig.from_env({**env, ENV_PREFIX + name.upper(): "true"})
    argv = ["--storage", str(tmp_path), "--save-mode", "thread", "--stager", "default", d.flag]
    with pytest.raises(UsageError, match=f"{d.flag}: .*(CUDA|accelerator)"):
        plan(build_parser().parse_args(argv))


def test_a_setting_acts_only_where_it_is_recorded() -> None:
    gcsfs = WorkloadConfig(
        world_size=2, layer_size=10, padding_size=4, backend="gcsfs", checkpoint_path="gs://bkt/p"
    )
    recorded = cli.settings(gcsfs, None)
    assert "threads" not in recorded and "sync_files" in recorded
    assert "model" in recorded and "layers" not in recorded  # the reference layout ran
