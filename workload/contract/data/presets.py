"""The dataset presets, each named for what it reproduces and with its source.

A preset fixes what a dataset is (format, sample size, samples per file, files) and what training
asks of it (batch size, the emulated accelerator's seconds per batch, the utilisation floor). Every
figure below is the source's; where a source gives none, the value is ckptbench's and says so.
The laptop shape is what ``ckptbench data`` runs when no count is given: the same sample size and
format, fewer files, and a smaller batch whose compute time shrinks with it, so the bytes per
second one accelerator demands are the preset's (docs/data-loading.md#presets).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckptbench.workload.contract.data.choices import DataFormat, DataPreset

KIB, MIB = 1024, 1024**2


@dataclass(frozen=True)
class Preset:
    name: DataPreset
    format: DataFormat
    sample_bytes: int
    samples_per_file: int
    files: int  # the source's dataset
    batch_size: int
    compute_seconds_per_batch: float  # 0: the source emulates no compute (a pure read)
    au_floor: float | None  # the minimum accelerator utilisation a run must keep; None: no floor
    workers: int  # the source's read threads (DataLoader workers)
    epochs: int
    source: str
    laptop_files: int
    laptop_samples_per_file: int
    laptop_batch_size: int
    laptop_workers: int = 2  # two cores make a laptop; more workers per accelerator only contend

    def compute_for(self, batch_size: int) -> float:
        """Seconds per batch of ``batch_size`` samples at the preset's seconds per sample."""
        if batch_size == self.batch_size:
            return self.compute_seconds_per_batch
        return round(self.compute_seconds_per_batch * batch_size / self.batch_size, 9)

    def demand_bytes_per_second(self) -> float | None:
        """What one accelerator reads per second when it never waits: a batch per compute time."""
        if self.compute_seconds_per_batch <= 0:
            return None
        return self.batch_size * self.sample_bytes / self.compute_seconds_per_batch


_MLPERF = (
    "MLPerf Storage's DLIO configuration configs/dlio/workload/{}_h100.yaml (mlcommons/storage)"
)
_DATAFLUX = (
    "gcs-torch-dataflux's published data-loading runs ({}; 5 epochs, DataFlux map-style dataset "
    "against direct GCS API calls); batch size and compute are ckptbench's (none published)"
)

PRESETS: dict[DataPreset, Preset] = {
    p.name: p
    for p in (
        Preset(
            DataPreset.MLPERF_UNET3D,
            DataFormat.NPZ,
            146_600_628,
            1,
            168,
            7,
            0.323,
            0.90,
            4,
            5,
            _MLPERF.format("unet3d") + "; its sample sizes vary (stdev 68 MB): ckptbench's are "
            "all the mean",
            4,
            1,
            7,
        ),
        Preset(
            DataPreset.MLPERF_RESNET50,
            DataFormat.RAW,
            114_660,
            1251,
            1024,
            400,
            0.224,
            0.90,
            8,
            5,
            _MLPERF.format("resnet50") + "; MLPerf stores TFRecord files of 1,251 records, "
            "ckptbench raw files of as many fixed-size records",
            4,
            128,
            32,
        ),
        Preset(
            DataPreset.MLPERF_COSMOFLOW,
            DataFormat.RAW,
            2_828_486,
            1,
            524_288,
            1,
            0.00350,
            0.70,
            4,
            5,
            _MLPERF.format("cosmoflow") + "; MLPerf stores one TFRecord per sample",
            64,
            1,
            1,
        ),
        Preset(
            DataPreset.FINEWEB_PARQUET,
            DataFormat.PARQUET,
            4 * KIB,
            16_384,
            1024,
            512,
            0.0,
            None,
            1,
            1,
            "gcs-torch-dataflux's parquet demo (FineWeb text, batch 512, one worker, files "
            "sharded across nodes); row length and rows per file are ckptbench's",
            8,
            1024,
            512,
        ),
        Preset(
            DataPreset.DATAFLUX_100KIB,
            DataFormat.RAW,
            100 * KIB,
            1,
            500_000,
            32,
            0.0,
            None,
            4,
            5,
            _DATAFLUX.format("100 KiB x 500,000 files: 1,299 s direct, 515 s DataFlux"),
            512,
            1,
            32,
        ),
        Preset(
            DataPreset.DATAFLUX_500KIB,
            DataFormat.RAW,
            500 * KIB,
            1,
            2_200_000,
            32,
            0.0,
            None,
            4,
            5,
            _DATAFLUX.format("500 KiB x 2.2 M files: 6,499 s direct, 2,058 s DataFlux"),
            128,
            1,
            32,
        ),
        Preset(
            DataPreset.DATAFLUX_3MIB,
            DataFormat.RAW,
            3 * MIB,
            1,
            50_000,
            32,
            0.0,
            None,
            4,
            5,
            _DATAFLUX.format("3 MiB x 50,000 files: 399 s direct, 277 s DataFlux"),
            32,
            1,
            8,
        ),
        Preset(
            DataPreset.DATAFLUX_150MIB,
            DataFormat.RAW,
            150 * MIB,
            1,
            5_000,
            1,
            0.0,
            None,
            4,
            5,
            _DATAFLUX.format("150 MiB x 5,000 files: 1,396 s direct, 1,173 s DataFlux"),
            4,
            1,
            1,
        ),
    )
}


# Settings a preset's laptop shape fills in when a local run leaves them empty.
LAPTOP_SHAPE = {
    "files": "laptop_files",
    "samples_per_file": "laptop_samples_per_file",
    "batch_size": "laptop_batch_size",
    "num_workers": "laptop_workers",
}


def laptop_shape(raw: dict[str, Any]) -> None:
    """Fill in ``raw`` (settings by name, its ``preset`` set) what its preset's laptop shape
    gives and ``raw`` leaves empty: ``ckptbench data`` and ``ckptbench run``'s loader alike."""
    preset = PRESETS[DataPreset(raw["preset"])]
    for name, laptop in LAPTOP_SHAPE.items():
        if raw.get(name) is None:
            raw[name] = getattr(preset, laptop)
