"""Data loading's settings: each declared once and reaching every audience, the preset's values
resolved and recorded, and each rule refused alike by its CEL (the API server) and its Python twin
(the rank, ckptbench data)."""

from __future__ import annotations

import itertools
from typing import Any

import celpy
import pytest
from celpy.adapter import json_to_cel
from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from ckptbench.workload.contract.data import settings as data_settings
from ckptbench.workload.contract.data.choices import DataFormat, DataPreset, Reader, Sharding
from ckptbench.workload.contract.data.config import DataConfig
from ckptbench.workload.contract.data.presets import PRESETS
from ckptbench.workload.contract.data.settings import DATA_RULES, DataSettings
from ckptbench.workload.contract.environment import ConfigError
from ckptbench.workload.local.data.options import OPTION_OF, OPTIONS, build_parser


def test_the_preset_fills_what_is_left_empty_and_the_record_says_what_ran() -> None:
    s = DataSettings(data_path="gs://b/p", preset=DataPreset.MLPERF_UNET3D)
    unet = PRESETS[DataPreset.MLPERF_UNET3D]
    record = s.record()
    assert record["format"] == "npz"
    assert record["sample_bytes"] == 146_600_628
    assert record["batch_size"] == 7
    assert record["compute_seconds_per_batch"] == unet.compute_seconds_per_batch == 0.323
    assert record["au_floor"] == 0.90
    assert record["num_workers"] == 4 and record["epochs"] == 5


def test_a_smaller_batch_keeps_the_presets_compute_per_sample() -> None:
    s = DataSettings(data_path="gs://b/p", batch_size=40)  # resnet50: 400 in 0.224 s
    assert s.resolved_compute_seconds == pytest.approx(0.0224)
    given = DataSettings(data_path="gs://b/p", batch_size=40, compute_seconds_per_batch=1.5)
    assert given.resolved_compute_seconds == 1.5


def test_no_compute_means_no_floor_unless_one_is_given() -> None:
    s = DataSettings(data_path="gs://b/p", preset=DataPreset.DATAFLUX_100KIB)
    assert s.resolved_au_floor is None
    assert (
        DataSettings(
            data_path="gs://b/p", compute_seconds_per_batch=0.1, preset=DataPreset.DATAFLUX_100KIB
        ).resolved_au_floor
        is None
    )
    assert DataSettings(data_path="gs://b/p", au_floor=0.5).resolved_au_floor == 0.5


def test_a_setting_acting_on_one_reader_is_recorded_only_with_it() -> None:
    assert (
        "dataflux_compose" in DataSettings(data_path="gs://b/p", backend=Reader.DATAFLUX).record()
    )
    assert "dataflux_compose" not in DataSettings(data_path="gs://b/p").record()
    assert "s3_reader" in DataSettings(data_path="s3://bkt/p", backend=Reader.S3).record()


def test_every_declared_setting_is_an_option_of_ckptbench_data() -> None:
    flags = {o.field: o.flag for o in OPTIONS if o.field}
    for d in data_settings.declared():
        assert d.name in flags or d.setting.runner, d.name
    assert OPTION_OF["data_path"] == "--storage"
    help_text = build_parser().format_help()
    for o in OPTIONS:
        assert o.flag in help_text


def test_a_rank_config_round_trips_through_its_variables() -> None:
    c = DataConfig(data_path="gs://b/p", backend=Reader.DATAFLUX, world_size=4, rank=2,
                   batch_size=3, shuffle=False, preset=DataPreset.MLPERF_COSMOFLOW)  # fmt: skip
    env = c.to_env()
    assert "CKPTBENCH_RANK" not in env
    back = DataConfig.from_env(env, rank=2)
    assert back == c


def test_a_bad_variable_is_named_with_its_reason() -> None:
    env = DataConfig(data_path="gs://b/p").to_env()
    env["CKPTBENCH_BATCH_SIZE"] = "0"
    with pytest.raises(ConfigError, match=r"CKPTBENCH_BATCH_SIZE \(batch_size\).*greater than"):
        DataConfig.from_env(env)


@pytest.mark.parametrize(
    ("path", "reader", "why"),
    [
        ("s3://bkt/p", Reader.GCS, "takes a gs:// URL"),
        ("gs://b/p", Reader.FILE, "takes an absolute path"),
        ("gs:///p", Reader.GCS, "no bucket"),
    ],
)
def test_a_path_the_reader_cannot_reach_is_refused(path: str, reader: Reader, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        DataConfig(data_path=path, backend=reader)


# Every combination of what the rules read, set or left to the preset.
_FIELDS = ("preset", "format", "samples_per_file", "sharding", "backend", "sample_bytes")
_CASES: list[dict[str, Any]] = [
    {k: v for k, v in zip(_FIELDS, combo, strict=True) if v is not None}
    for combo in itertools.product(
        [None, DataPreset.FINEWEB_PARQUET, DataPreset.MLPERF_UNET3D, DataPreset.DATAFLUX_3MIB],
        [None, DataFormat.RAW, DataFormat.PARQUET],
        [None, 1, 5],
        [None, Sharding.SAMPLE, Sharding.FILE],
        [None, Reader.S3, Reader.GCS],
        [None, 1024**3],
    )
]


def _cel(program: Any, spec: dict[str, Any]) -> bool:
    doc = {to_camel(k): (v.value if hasattr(v, "value") else v) for k, v in spec.items()}
    return bool(program.evaluate({"self": json_to_cel(doc)}))


@pytest.mark.parametrize("rule", DATA_RULES, ids=lambda r: r.field)
def test_each_rules_cel_and_python_agree_on_every_case(rule: Any) -> None:
    env = celpy.Environment()
    program = env.program(env.compile(rule.cel))
    disagree = []
    for spec in _CASES:
        settings = DataSettings.model_construct(**{"data_path": "s3://bkt/p", **spec})
        settings = DataSettings.model_validate(settings.model_dump())
        if rule.check(settings) != _cel(program, spec):
            disagree.append(spec)
    assert not disagree, disagree[:3]
    assert any(not rule.check(DataSettings(data_path="s3://bkt/p", **s)) for s in _CASES)


def test_a_broken_rule_names_the_fields_it_reads() -> None:
    with pytest.raises(ValidationError, match=r"sharding: must be file with format npz or parquet"):
        DataConfig(data_path="gs://b/p", preset=DataPreset.FINEWEB_PARQUET)
    with pytest.raises(ValidationError, match=r"backend: maps whole objects"):
        DataConfig(data_path="s3://bkt/p", backend=Reader.S3, samples_per_file=2)
