"""The named choices of a data-loading benchmark: the reader, the dataset's format, how samples are
dealt to the emulated accelerators, and the presets named for what they reproduce."""

from __future__ import annotations

import enum


class Reader(enum.StrEnum):
    """The library a rank reads the dataset with: the ones users train with."""

    DATAFLUX = "dataflux"  # gcs-torch-dataflux's DataFlux datasets (Google's connector)
    GCS = "gcs"  # google-cloud-storage, one download per object: the connector's "direct API"
    GCSFS = "gcsfs"  # fsspec over gcsfs
    S3 = "s3"  # s3torchconnector's S3MapDataset / S3IterableDataset (AWS's CRT client)
    S3FS = "s3fs"  # fsspec over s3fs
    FILE = "file"  # a local or mounted path

    @property
    def scheme(self) -> str:
        """The URL scheme the dataset's path takes ("" for a local path)."""
        return _SCHEMES[self]

    @property
    def is_library_dataset(self) -> bool:
        """Whether the library ships the torch Dataset (it lists the prefix and maps objects
        itself), rather than ckptbench's dataset fetching through the library's client."""
        return self in (Reader.DATAFLUX, Reader.S3)


_SCHEMES = {
    Reader.DATAFLUX: "gs://",
    Reader.GCS: "gs://",
    Reader.GCSFS: "gs://",
    Reader.S3: "s3://",
    Reader.S3FS: "s3://",
    Reader.FILE: "",
}


class DataFormat(enum.StrEnum):
    """How samples are stored (docs/data-loading.md#the-dataset)."""

    RAW = "raw"  # fixed-size samples back to back (one per object, or records like TFRecord's)
    NPZ = "npz"  # numpy's npz: one uint8 array of samples per file (3D U-Net's arrays)
    PARQUET = "parquet"  # text rows with their id and checksum, as FineWeb's shards hold them

    @property
    def extension(self) -> str:
        return {"raw": "bin", "npz": "npz", "parquet": "parquet"}[self.value]


class Sharding(enum.StrEnum):
    """How the dataset is dealt to the emulated accelerators."""

    # A map-style dataset of samples under DistributedSampler: each accelerator reads its samples,
    # one request each (a ranged one where a file holds several).
    SAMPLE = "sample"
    # An iterable dataset: whole files dealt to accelerators and their loader's workers, each file
    # read once and its samples yielded in order (the connector's parquet demo).
    FILE = "file"


class DataPreset(enum.StrEnum):
    MLPERF_UNET3D = "mlperf-unet3d"
    MLPERF_RESNET50 = "mlperf-resnet50"
    MLPERF_COSMOFLOW = "mlperf-cosmoflow"
    FINEWEB_PARQUET = "fineweb-parquet"
    DATAFLUX_100KIB = "dataflux-100kib"
    DATAFLUX_500KIB = "dataflux-500kib"
    DATAFLUX_3MIB = "dataflux-3mib"
    DATAFLUX_150MIB = "dataflux-150mib"
