"""Every setting of a data-loading benchmark, declared once (as the checkpoint ones are, in
``contract/settings.py``): the CR field, the rank's ``CKPTBENCH_*`` variable, the ``ckptbench data``
option, the sweep axis and the record in every result come from one declaration here, with the rules
that span them (:data:`DATA_RULES`). What a preset fills in when a setting is left empty is resolved
by the properties at the end (``resolved_*``); a result records the resolved values.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, Field

from ckptbench.workload.contract.choices import S3Reader
from ckptbench.workload.contract.data.choices import DataFormat, DataPreset, Reader, Sharding
from ckptbench.workload.contract.data.presets import PRESETS, Preset
from ckptbench.workload.contract.declaration import Declared, Setting, choice, declared_fields
from ckptbench.workload.contract.rule import Rule
from ckptbench.workload.contract.storage_settings import CHECKPOINT_PATH_PATTERN, ServiceSettings

# A sample starts with its 16-byte header (magic, index, checksum): nothing smaller holds one.
MIN_SAMPLE_BYTES = 64
MAX_SAMPLE_BYTES = 1024**3
MAX_FILES = 100_000_000
MAX_SAMPLES_PER_FILE = 1_000_000


class LoaderSettings(BaseModel):
    """The loader: the dataset, the reader and the batches each training step takes.

    Declared once for both benchmarks that read a dataset: ``ckptbench data`` (:class:`DataSettings`
    extends it with the run's own settings) and a checkpoint run whose training step takes its
    batches from the loader (its ``data_loading`` group, ``contract/settings.py``)."""

    OPTIONS_GROUP: ClassVar[str] = "loader"

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # What was set, not every default: the group appears whole in refusals (rule.py).
        for name in self.model_fields_set:
            yield name, getattr(self, name)

    backend: Annotated[Reader, Setting(axis=True, metavar="NAME")] = choice(
        Reader.GCS,
        "The library each rank reads with: dataflux (gcs-torch-dataflux's DataFlux datasets, "
        "Google's connector), gcs (google-cloud-storage, one download per request: the "
        "connector's direct-API baseline), gcsfs or s3fs (fsspec files), s3 (s3torchconnector's "
        "S3MapDataset / S3IterableDataset) or file (a local or mounted path, read cold).",
    )
    preset: Annotated[DataPreset, Setting(axis=True, metavar="NAME")] = choice(
        DataPreset.MLPERF_RESNET50,
        "What the dataset and the training step reproduce: mlperf-unet3d, mlperf-resnet50, "
        "mlperf-cosmoflow (MLPerf Storage's training workloads, H100 compute times), "
        "fineweb-parquet (the connector's parquet demo) or dataflux-100kib, dataflux-500kib, "
        "dataflux-3mib, dataflux-150mib (the connector's four file-size regimes). The settings "
        "below that are left empty take the preset's values.",
    )
    format: Annotated[DataFormat | None, Setting(axis=True, metavar="FORMAT")] = choice(
        None,
        "How samples are stored: raw (fixed-size samples back to back), npz (a numpy array per "
        "file) or parquet (text rows with their id and checksum); default: the preset's.",
    )
    sample_bytes: Annotated[
        int | None, Setting(unit="bytes", flag="--sample-size", axis=True, metavar="SIZE")
    ] = Field(
        None,
        ge=MIN_SAMPLE_BYTES,
        le=MAX_SAMPLE_BYTES,
        description="Bytes of one sample (a parquet row's text); default: the preset's.",
    )
    samples_per_file: Annotated[int | None, Setting(axis=True)] = Field(
        None,
        ge=1,
        le=MAX_SAMPLES_PER_FILE,
        description="Samples in one file (rows of a parquet file); default: the preset's.",
    )
    files: Annotated[int | None, Setting(axis=True)] = Field(
        None,
        ge=1,
        le=MAX_FILES,
        description="Files in the dataset; default: the preset's (ckptbench data: its laptop "
        "count, with its laptop samples per file and batch size).",
    )
    num_workers: Annotated[int | None, Setting(axis=True, flag="--workers")] = Field(
        None,
        ge=0,
        le=64,
        description="DataLoader worker processes per accelerator (MLPerf's read_threads); 0 reads "
        "in the accelerator's own thread; default: the preset's.",
    )
    batch_size: Annotated[int | None, Setting(axis=True, flag="--batch-size")] = Field(
        None, ge=1, le=100_000, description="Samples per batch; default: the preset's."
    )
    prefetch_factor: Annotated[int, Setting(axis=True, flag="--prefetch")] = Field(
        2,
        ge=1,
        le=64,
        description="Batches each worker loads ahead (DataLoader's prefetch_factor).",
    )
    shuffle: Annotated[
        bool,
        Setting(
            flag="--no-shuffle",
            axis=True,
            switch="Read samples (or files) in their order, the same every epoch (by default they "
            "are shuffled from the seed each epoch)",
        ),
    ] = Field(
        True,
        description="Shuffle samples (or files, with sharding file) each epoch from the seed; off "
        "reads them in order.",
    )
    sharding: Annotated[Sharding, Setting(axis=True, metavar="HOW")] = choice(
        Sharding.SAMPLE,
        "How the dataset is dealt to the accelerators: sample (a map-style dataset under "
        "DistributedSampler, one request per sample, ranged where a file holds several) or file "
        "(an iterable dataset: whole files dealt to accelerators and workers, each read once, as "
        "the connector's parquet demo does).",
    )
    compute_seconds_per_batch: Annotated[
        float | None, Setting(unit="seconds", axis=True, flag="--compute", metavar="SECONDS")
    ] = Field(
        None,
        ge=0,
        le=3600,
        description="Seconds the emulated accelerator spends on a batch without touching it; "
        "default: the preset's seconds per sample times the batch size.",
    )
    dataflux_compose: Annotated[
        bool,
        Setting(
            backends=("dataflux",),
            flag="--no-dataflux-compose",
            axis=True,
            switch="Reader dataflux: download each object alone (by default a batch's small "
            "objects are composed into one first)",
        ),
    ] = Field(
        True,
        description="Reader dataflux: compose a batch's small objects into one before the "
        "download (the connector's default; the composed objects are deleted after); off "
        "downloads each object.",
    )
    s3_reader: Annotated[S3Reader, Setting(backends=("s3",), axis=True, metavar="KIND")] = choice(
        S3Reader.SEQUENTIAL,
        "Reader s3: s3torchconnector's reader kind: sequential (one GET streamed whole) or ranged "
        "(a ranged GET per read).",
    )
    verify: Annotated[
        bool,
        Setting(
            flag="--no-verify",
            switch="Hand samples to the accelerators unchecked: the reads alone are measured (by "
            "default every sample is checked against its checksum and index)",
        ),
    ] = Field(
        True,
        description="Check every sample handed to the accelerator against its checksum and its "
        "index; off measures the reads alone.",
    )
    # -- what the preset fills in ----------------------------------------------------------------

    @property
    def preset_spec(self) -> Preset:
        return PRESETS[self.preset]

    @property
    def resolved_format(self) -> DataFormat:
        return self.format or self.preset_spec.format

    @property
    def resolved_sample_bytes(self) -> int:
        return self.sample_bytes or self.preset_spec.sample_bytes

    @property
    def resolved_samples_per_file(self) -> int:
        return self.samples_per_file or self.preset_spec.samples_per_file

    @property
    def resolved_files(self) -> int:
        return self.files or self.preset_spec.files

    @property
    def resolved_workers(self) -> int:
        return self.preset_spec.workers if self.num_workers is None else self.num_workers

    @property
    def resolved_batch_size(self) -> int:
        return self.batch_size or self.preset_spec.batch_size

    @property
    def resolved_compute_seconds(self) -> float:
        if self.compute_seconds_per_batch is not None:
            return self.compute_seconds_per_batch
        return self.preset_spec.compute_for(self.resolved_batch_size)

    @property
    def total_samples(self) -> int:
        return self.resolved_files * self.resolved_samples_per_file

    @property
    def total_bytes(self) -> int:
        """Sample bytes in the dataset (what a full epoch hands to the accelerators)."""
        return self.total_samples * self.resolved_sample_bytes

    @property
    def file_bytes(self) -> int:
        return self.resolved_samples_per_file * self.resolved_sample_bytes


class DataSettings(LoaderSettings, ServiceSettings):
    """The dataset, the readers and the training step: the same for every rank."""

    OPTIONS_GROUP: ClassVar[str] = "data"

    data_path: Annotated[str, Setting(flag="--storage", runner=True, metavar="URL")] = Field(
        ...,
        min_length=1,
        max_length=1024,
        description="Where the dataset lives: gs://bucket/prefix for dataflux, gcs and gcsfs, "
        "s3://bucket/prefix for s3 and s3fs, an absolute path for file. The dataset goes under "
        "<dataPath>/datasets/<its name>/ and is reused by every run that asks for the same one; "
        "results go under <dataPath>/<run>/.",
        json_schema_extra={"pattern": CHECKPOINT_PATH_PATTERN},
    )
    seed: Annotated[int, Setting()] = Field(
        0,
        ge=0,
        le=2**31 - 1,
        description="Seed of the dataset's content and of the shuffles: the same seed makes the "
        "same bytes and the same order.",
    )
    world_size: Annotated[int, Setting(axis=True, local_default=2)] = Field(
        1, ge=1, le=100_000, description="Ranks (pods): each runs acceleratorsPerRank loaders."
    )
    accelerators_per_rank: Annotated[int, Setting(axis=True, flag="--accelerators")] = Field(
        1,
        ge=1,
        le=64,
        description="Emulated accelerators per rank, each with its own DataLoader over its share "
        "of the dataset (MLPerf Storage runs one process per accelerator). A comma list draws "
        "the AU curve: the largest number whose utilisation stays at the floor is the headline.",
    )
    epochs: Annotated[int | None, Setting(axis=True, local_default=1)] = Field(
        None, ge=1, le=1000, description="Passes over the dataset; default: the preset's."
    )
    au_floor: Annotated[float | None, Setting(flag="--au-floor", metavar="RATIO")] = Field(
        None,
        ge=0,
        le=1,
        description="The accelerator utilisation a run must keep to pass (MLPerf's 0.90 or "
        "0.70); default: the preset's, none for a preset that emulates no compute.",
    )
    rendezvous_timeout_seconds: Annotated[
        float,
        Setting(unit="seconds", flag="--rendezvous-timeout", local_default=60.0, metavar="SECONDS"),
    ] = Field(600.0, ge=1, le=86_400, description="How long a rank waits for rank 0 to answer.")
    progress_timeout_seconds: Annotated[
        float, Setting(unit="seconds", flag="--progress-timeout", metavar="SECONDS")
    ] = Field(
        300.0,
        ge=1,
        le=86_400,
        description="A rank that neither beats its heartbeat nor moves a byte for this long is "
        "frozen and stopped.",
    )

    # -- what follows from them -------------------------------------------------------------------

    @property
    def resolved_epochs(self) -> int:
        return self.epochs or self.preset_spec.epochs

    @property
    def resolved_au_floor(self) -> float | None:
        if self.au_floor is not None:
            return self.au_floor
        return self.preset_spec.au_floor if self.resolved_compute_seconds > 0 else None

    @property
    def accelerators(self) -> int:
        """Emulated accelerators in the whole run."""
        return self.world_size * self.accelerators_per_rank

    def samples_per_accelerator(self) -> int:
        """Samples one accelerator reads in an epoch under sample sharding (DistributedSampler's
        share, padded to equal shares as it pads them)."""
        return math.ceil(self.total_samples / self.accelerators)

    def record(self) -> dict[str, Any]:
        """Every declared setting as it ran, the preset's values resolved."""
        out = self.model_dump(mode="json", include={d.name for d in declared()})
        out.update(
            format=self.resolved_format.value,
            sample_bytes=self.resolved_sample_bytes,
            samples_per_file=self.resolved_samples_per_file,
            files=self.resolved_files,
            num_workers=self.resolved_workers,
            batch_size=self.resolved_batch_size,
            epochs=self.resolved_epochs,
            compute_seconds_per_batch=self.resolved_compute_seconds,
            au_floor=self.resolved_au_floor,
        )
        return {d.name: out[d.name] for d in declared() if d.setting.acts_in(self)}


def _whole_files(s: LoaderSettings) -> bool:
    return s.resolved_format is DataFormat.RAW or s.resolved_samples_per_file == 1


def _cel(field: str, default: object) -> str:
    """CEL for a field's value as a rank resolves it: the CR's, else ``default`` (CEL)."""
    return f"(has(self.{field}) ? self.{field} : {default})"


_PRESET = _cel("preset", f"'{DataPreset.MLPERF_RESNET50.value}'")


def _from_preset(attr: str) -> str:
    """CEL for a preset's value of ``attr``: one ternary per preset, as the table says."""
    presets = list(PRESETS.values())
    text = _literal(getattr(presets[-1], attr))
    for p in reversed(presets[:-1]):
        text = f"({_PRESET} == '{p.name.value}' ? {_literal(getattr(p, attr))} : {text})"
    return text


def _literal(value: object) -> str:
    return f"'{value.value}'" if isinstance(value, enum.Enum) else str(value)


_FORMAT = _cel("format", _from_preset("format"))
_PER_FILE = _cel("samplesPerFile", _from_preset("samples_per_file"))
_SAMPLE_BYTES = _cel("sampleBytes", _from_preset("sample_bytes"))
_SHARDING = _cel("sharding", f"'{Sharding.SAMPLE.value}'")
_BACKEND = _cel("backend", f"'{Reader.GCS.value}'")
MAX_FILE_BYTES = 4 * 1024**3

# The rules that span the data-loading settings (rule.py says how a rule is read). Their CEL
# resolves what the preset fills in, as the rank does, so the API server and the rank agree.
DATA_RULES: tuple[Rule[LoaderSettings], ...] = (
    Rule(
        "sharding",
        f"{_SHARDING} != 'sample' || {_FORMAT} == 'raw' || {_PER_FILE} == 1",
        "must be file with {format} npz or parquet holding several samples a file "
        "({samples_per_file}): such a file is read whole, never one sample at a time",
        lambda s: s.sharding is Sharding.FILE or _whole_files(s),
    ),
    Rule(
        "backend",
        f"!({_BACKEND} in ['dataflux', 's3']) || {_SHARDING} == 'file' || {_PER_FILE} == 1",
        "maps whole objects: with {sharding} sample it needs one sample a file "
        "({samples_per_file} 1)",
        lambda s: (
            not s.backend.is_library_dataset
            or s.sharding is Sharding.FILE
            or s.resolved_samples_per_file == 1
        ),
    ),
    Rule(
        "sample_bytes",
        f"{_SAMPLE_BYTES} * {_PER_FILE} <= {MAX_FILE_BYTES}",
        "times {samples_per_file} must be at most 4 GiB: a file is held whole in memory",
        lambda s: s.file_bytes <= MAX_FILE_BYTES,
    ),
)


def declared() -> Iterator[Declared]:
    """The declared data-loading settings: the benchmark's own in declaration order, then the
    storage service's."""
    return declared_fields(DataSettings, first_from=ServiceSettings)
