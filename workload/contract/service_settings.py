"""Which storage service a benchmark talks to: the GCP project and the S3 endpoint, region and
addressing, declared once for both workloads (checkpoints: ``StorageSettings``; data loading:
``data.settings.DataSettings``), which extend :class:`ServiceSettings`.

A setting here acts only with the backends that reach its service (``Setting.backends``): the names
are the checkpoint backends' and the data readers' alike (``gcs``, ``s3``, ...).
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BaseModel, Field

from ckptbench.workload.contract.declaration import Setting

S3_BACKENDS = ("s3", "s3fs")
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
        "AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, else AWS's own for the region. `ckptbench run` "
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
