"""Where a benchmark's checkpoints go and how each storage backend moves them, declared once, and
which storage service both workloads talk to (:class:`ServiceSettings`: the GCP project, the S3
endpoint, region and addressing; the data-loading settings extend it too).

:class:`StorageSettings` holds the backend, the checkpoint path and every backend's own knob (gcs,
gcsfs, s3, s3fs, file), with S3's bucket-name rules that the path and ``ckptbench clean`` share.
:class:`~ckptbench.workload.contract.state_settings.StateSettings` extends it (and
:class:`~ckptbench.workload.contract.settings.BenchmarkSettings` that): the declarations are read
the same way (``settings.declared()``) wherever a field is declared. The rule that a backend's path
takes its URL scheme follows the class (:data:`STORAGE_RULES`).
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar

from pydantic import BaseModel, Field, field_validator

from ckptbench.workload.contract.choices import Backend, S3PrefixStrategy, S3Reader, UploadScheme
from ckptbench.workload.contract.declaration import Setting, choice
from ckptbench.workload.contract.rule import Rule

MIB = 1024**2
# S3's bucket names: 3 to 63 lowercase letters, digits, dots and dashes, starting and ending with
# a letter or digit (S3's rules; the ones a pattern cannot say are checked in s3_bucket_problem).
S3_BUCKET_PATTERN = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
# A local path, file://..., gs://bucket[/prefix] or s3://bucket[/prefix]: the schemes a backend
# may write to. No whitespace and no control character (a NUL cut the path short in open()).
_PATH_CHARS = r"[^\s\x00-\x1f\x7f]*"
CHECKPOINT_PATH_PATTERN = (
    rf"^(gs://[a-z0-9][a-z0-9._-]{{1,220}}[a-z0-9](/{_PATH_CHARS})?"
    rf"|s3://{S3_BUCKET_PATTERN}(/{_PATH_CHARS})?|file:///{_PATH_CHARS}|/{_PATH_CHARS})$"
)
S3_BACKENDS = ("s3", "s3fs")


def s3_bucket_problem(bucket: str) -> str | None:
    """Why ``bucket`` is not an S3 bucket name (S3's naming rules), or None when it is one."""
    if not bucket:
        return "no bucket"
    if not 3 <= len(bucket) <= 63:
        return f"{bucket!r} is not a bucket name: S3 bucket names are 3 to 63 characters"
    if not re.fullmatch(S3_BUCKET_PATTERN, bucket):
        return (
            f"{bucket!r} is not a bucket name: S3 bucket names hold lowercase letters, digits, "
            "dots and dashes, and start and end with a letter or digit"
        )
    if ".." in bucket:
        return f"{bucket!r} is not a bucket name: S3 bucket names hold no two dots in a row"
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", bucket):
        return f"{bucket!r} is not a bucket name: S3 bucket names are not IP addresses"
    if bucket.startswith(("xn--", "sthree-")) or bucket.endswith(("-s3alias", "--ol-s3")):
        return f"{bucket!r} is not a bucket name: S3 reserves that prefix or suffix"
    return None


# The Python clients that take a GCP project: google-cloud-storage's (gcs, and the dataflux
# connector on top of it) and gcsfs.
GCS_PROJECT_BACKENDS = ("gcs", "gcsfs", "dataflux")


class ServiceSettings(BaseModel):
    """The storage service: a GCP project, or an S3 endpoint, region and addressing."""

    OPTIONS_GROUP: ClassVar[str] = "service"

    project: Annotated[str | None, Setting(backends=GCS_PROJECT_BACKENDS, metavar="ID")] = Field(
        None,
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9.:_-]*$",
        description="GCP project of the storage clients; default: the one of the credentials.",
    )
    s3_endpoint: Annotated[str | None, Setting(backends=S3_BACKENDS, metavar="URL")] = Field(
        None,
        min_length=1,
        max_length=1024,
        pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="Backends s3 and s3fs: the S3 endpoint (MinIO, Ceph RGW, R2 ...); default "
        "AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, else AWS's own for the region. A local run "
        "with neither starts an embedded S3 server (moto).",
    )
    s3_region: Annotated[str | None, Setting(backends=S3_BACKENDS, metavar="REGION")] = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9-]+$",
        description="Backends s3 and s3fs: the bucket's region; default AWS_REGION or "
        "AWS_DEFAULT_REGION, else us-east-1.",
    )
    s3_path_style: Annotated[bool, Setting(backends=S3_BACKENDS)] = Field(
        False,
        description="Backends s3 and s3fs: path-style addressing (endpoint/bucket/key) instead of "
        "virtual-hosted (bucket.endpoint/key), as MinIO and most on-premises stores need. "
        "Always on for an endpoint given by IP address or localhost.",
    )


def gcs_bucket_problem(bucket: str) -> str | None:
    """Why ``bucket`` is not a GCS bucket name (GCS's naming rules), or None when it is one."""
    if not bucket:
        return "no bucket"
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]", bucket):
        return (
            f"{bucket!r} is not a bucket name: GCS bucket names are 3 to 222 characters of "
            "lowercase letters, digits, dots, dashes and underscores, starting and ending with a "
            "letter or digit"
        )
    words = bucket.split(".")
    if "" in words:
        return f"{bucket!r} is not a bucket name: GCS bucket names hold no two dots in a row"
    if len(bucket) > 63 and len(words) == 1:
        return f"{bucket!r} is not a bucket name: a GCS bucket name without dots is 3 to 63 long"
    if any(len(word) > 63 for word in words):
        return f"{bucket!r} is not a bucket name: each dot-separated part is at most 63 characters"
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", bucket):
        return f"{bucket!r} is not a bucket name: GCS bucket names are not IP addresses"
    if bucket.startswith("goog") or re.search(r"g[o0][o0]g[l1]e", bucket):
        return (
            f"{bucket!r} is not a bucket name: GCS reserves names that start with 'goog' or "
            "hold 'google' or a misspelling of it"
        )
    return None


def bucket_problem(url: str) -> str | None:
    """Why the bucket of a ``gs://`` or ``s3://`` URL is no bucket name; None for other URLs."""
    for scheme, problem in (("gs://", gcs_bucket_problem), ("s3://", s3_bucket_problem)):
        if url.startswith(scheme):
            return problem(url[len(scheme) :].split("/", 1)[0])
    return None


class StorageSettings(ServiceSettings):
    """Where the checkpoints go, and how: the storage backend and its knobs."""

    # The group its settings are listed in by `ckptbench run --help` (and `sizes`).
    OPTIONS_GROUP: ClassVar[str] = "storage"

    backend: Annotated[Backend, Setting(axis=True, metavar="NAME")] = choice(
        Backend.GCS,
        "Storage backend: gcs (ckptbench's own writer and reader: each rank's file is cut into "
        "partSizeBytes parts uploaded by `threads` workers (see uploadScheme); loads are "
        "parallel ranged reads straight into the tensors), gcsfs (DCP's fsspec writer/reader "
        "over gcsfs, the reference's USE_FSSPEC), s3 (s3torchconnector's DCP writer and reader, "
        "AWS's CRT client), s3fs (DCP's fsspec writer/reader over s3fs, the baseline beside s3), "
        "dataflux (Google's connector, gcs-torch-dataflux: its DCP writer and reader, XML "
        "multipart uploads of each file buffered whole, and its one-object checkpoint for format "
        "torch-save) or file (a local or mounted filesystem).",
    )
    checkpoint_path: Annotated[str, Setting(flag="--storage", runner=True, metavar="URL")] = Field(
        ...,
        min_length=1,
        max_length=1024,
        description="Where checkpoints and results go: gs://bucket/prefix for gcs, gcsfs and "
        "dataflux, "
        "s3://bucket/prefix for s3 and s3fs, an absolute path for file (in a cluster, under a "
        "shared volumeMount when worldSize > 1). "
        "Each run writes under <checkpointPath>/<run>/ (the reference's CKPT_DIR_PATH).",
        # The API server checks the shape; Python checks it field by field, with messages that
        # say what is wrong (WorkloadConfig), rather than by a regular expression.
        json_schema_extra={"pattern": CHECKPOINT_PATH_PATTERN},
    )
    drop_cache: Annotated[
        bool,
        Setting(
            backends=("file",),
            flag="--keep-cache",
            axis=True,
            switch="Backend file: leave the written files in the node's page cache, so loads may "
            "read memory (by default they are evicted before each load)",
        ),
    ] = Field(
        True,
        description="Backend file: evict the written files from the node's page cache before "
        "each load, so loads read the storage (a network file system may still cache on its "
        "server; docs/measurement.md). False keeps the cache.",
    )
    threads: Annotated[int, Setting(backends=("gcs", "dataflux"), unit="threads", axis=True)] = (
        Field(
            8,
            ge=1,
            le=256,
            description="Transfer threads per rank (backend gcs); backend dataflux: DCP's "
            "thread_count, the files a rank writes at once (at most one per tensor it holds), "
            "each uploaded in 8 parallel parts by the connector.",
        )
    )
    part_size_bytes: Annotated[
        int,
        Setting(backends=("gcs",), unit="bytes", flag="--part-size", axis=True, metavar="SIZE"),
    ] = Field(
        32 * MIB,
        ge=1 * MIB,
        le=5 * 1024 * MIB,
        description="Upload part and ranged download size in bytes (backend gcs); the "
        "multipart upload scheme raises it to GCS's 5 MiB minimum part.",
    )
    upload_scheme: Annotated[
        UploadScheme, Setting(backends=("gcs",), axis=True, metavar="SCHEME")
    ] = choice(
        UploadScheme.AUTO,
        "Backend gcs: how a rank's parts become its object: multipart (GCS's XML multipart "
        "upload: no compose, no part deletes, what Google recommends for parallel uploads), "
        "compose (a parallel composite upload: parts as temporary objects, composed, then "
        "deleted) or auto (multipart on GCS; compose against an emulator, since none "
        "implements the XML multipart upload).",
    )
    checksums: Annotated[
        bool,
        Setting(
            backends=("gcs",),
            flag="--no-checksums",
            axis=True,
            switch="Backend gcs: skip crc32c on uploaded parts and reads (by default every one is "
            "computed and checked)",
        ),
    ] = Field(
        True, description="Backend gcs: crc32c on every uploaded part and every read, checked."
    )
    sync_files: Annotated[bool, Setting(backends=("gcsfs", "s3fs"), axis=True)] = Field(
        False,
        description="Backends gcsfs and s3fs: let DCP os.sync() the node after each file, as it "
        "does for streams without fileno() (off, as the reference runs it; on reproduces the old "
        "handicapped baseline).",
    )
    stall_seconds: Annotated[
        float, Setting(backends=("gcs",), unit="seconds", metavar="SECONDS")
    ] = Field(
        60.0,
        ge=1,  # not gt=0: Kubernetes' schema and JSON Schema disagree on exclusiveMinimum
        le=3600,
        description="Backend gcs: a transfer that moves no byte for this long is abandoned and "
        "retried.",
    )
    request_deadline_seconds: Annotated[
        float, Setting(backends=("gcs", "s3"), unit="seconds", metavar="SECONDS")
    ] = Field(
        900.0,
        ge=1,  # not gt=0: Kubernetes' schema and JSON Schema disagree on exclusiveMinimum
        le=86_400,
        description="Backend gcs: the most one request may take, retries included. Backend "
        "s3: the most ckptbench's retries of one file may take (429s the CRT client does not "
        "retry).",
    )
    s3_threads: Annotated[int, Setting(backends=("s3",), unit="threads", axis=True)] = Field(
        1,
        ge=1,
        le=256,
        description="Backend s3: writer threads per rank (s3torchconnector's thread_count: DCP "
        "splits each rank's items into this many objects, one stream each; 1 is the library's "
        "default). Each stream is itself uploaded in parallel parts by the CRT client.",
    )
    s3_prefix_strategy: Annotated[
        S3PrefixStrategy, Setting(backends=("s3",), axis=True, metavar="STRATEGY")
    ] = choice(
        S3PrefixStrategy.NONE,
        "Backend s3: where each rank's objects go under the checkpoint (s3torchconnector's "
        "prefix strategies, its answer to 503 SlowDown): none (DCP's flat names), round-robin "
        "(16 folders, 0 to f), binary or hex (a reversed rank number as a leading folder).",
    )
    s3_part_size_bytes: Annotated[
        int,
        Setting(backends=("s3",), unit="bytes", flag="--s3-part-size", axis=True, metavar="SIZE"),
    ] = Field(
        8 * MIB,
        ge=5 * MIB,
        le=5 * 1024 * MIB,
        description="Backend s3: multipart upload part and ranged download size in bytes (S3's "
        "limits: 5 MiB to 5 GiB; the library's default 8 MiB).",
    )
    s3_throughput_gbps: Annotated[
        float, Setting(backends=("s3",), unit="Gbit/s", axis=True, metavar="GBPS")
    ] = Field(
        10.0,
        ge=1,  # not gt=0: Kubernetes' schema and JSON Schema disagree on exclusiveMinimum
        le=3200,
        description="Backend s3: the CRT client's throughput target per rank, in Gbit/s: it "
        "sizes its connection pool from it (the library's default 10).",
    )
    s3_reader: Annotated[S3Reader, Setting(backends=("s3",), axis=True, metavar="READER")] = choice(
        S3Reader.DCP_OPTIMIZED,
        "Backend s3: how loads read: dcp-optimized (ranged GETs of the items DCP plans, "
        "coalesced; the library's DCP default), sequential (one streamed GET per object) or "
        "ranged (a ranged GET per read).",
    )

    @field_validator("checkpoint_path")
    @classmethod
    def _path_shape(cls, value: str) -> str:
        # The same shape the CRD's pattern admits, refused with a reason rather than the pattern.
        if re.fullmatch(CHECKPOINT_PATH_PATTERN, value):
            problem = bucket_problem(value)
            if problem is None:
                return value
            raise ValueError(problem)
        if value.startswith(("s3://", "gs://")):
            problem = bucket_problem(value)
            raise ValueError(
                f"{problem} in {value!r}"
                if problem is not None
                else "whitespace or a control character in the URL"
            )
        raise ValueError(
            "must be gs://bucket/prefix, s3://bucket/prefix, file:///path or an absolute path, "
            "without whitespace or control characters"
        )


def _scheme_rule(scheme: str) -> Rule[StorageSettings]:
    """The backends that take ``scheme`` take no other path (Backend.scheme says which)."""
    backends = tuple(b for b in Backend if b.scheme == scheme)
    listed = ", ".join(f"'{b.value}'" for b in backends)
    return Rule(
        "checkpoint_path",
        f"!(self.backend in [{listed}]) || self.checkpointPath.startsWith('{scheme}')",
        f"must be {scheme}bucket/prefix for {{backend}} "
        + " or ".join([", ".join(b.value for b in backends[:-1]), backends[-1].value]),
        lambda s: s.backend not in backends or s.checkpoint_path.startswith(scheme),
    )


# The rules that span the storage's settings (rule.py says how a rule is read); settings.py's
# SETTINGS_RULES holds them with the others.
STORAGE_RULES: tuple[Rule[StorageSettings], ...] = tuple(
    _scheme_rule(scheme) for scheme in dict.fromkeys(b.scheme for b in Backend) if scheme
)
