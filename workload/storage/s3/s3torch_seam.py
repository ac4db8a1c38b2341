"""Every name of s3torchconnector the project uses, in one place, checked at import.

s3torchconnector's DCP classes take no endpoint: ``S3StorageWriter`` and ``S3StorageReader`` build
their own ``S3FileSystem`` over their own ``S3Client``, whose import path is private
(``s3torchconnector._s3client``), from the region and an ``S3ClientConfig`` alone. To reach
MinIO, Ceph RGW or a local server, and to make one client per rank rather than one per sample,
the writer's and reader's ``fs`` is replaced here by an ``S3FileSystem`` over a client made with
the endpoint. The exception type is private too (``s3torchconnectorclient._mountpoint_s3_client``).
All of that was written against :data:`WRITTEN_FOR`; another version gets a warning naming both,
and one without these names fails at import saying which.
"""

from __future__ import annotations

import warnings
from importlib import metadata
from typing import Any

WRITTEN_FOR = "1.5.0"


class S3TorchSeamError(ImportError):
    """A name of s3torchconnector this project relies on is gone."""


def check_version(found: str) -> str | None:
    """A warning text when ``found`` is not the version this seam was written for, else None."""
    if found == WRITTEN_FOR:
        return None
    return (
        f"ckptbench's s3torchconnector seam was written for {WRITTEN_FOR}, found {found}: the "
        "s3 backend injects its client into the DCP classes' private file system"
    )


try:
    _mismatch = check_version(metadata.version("s3torchconnector"))
except metadata.PackageNotFoundError:  # pragma: no cover - depends on the install
    raise S3TorchSeamError(
        "backend s3 needs s3torchconnector[dcp]==1.5.0 (pip install 'ckptbench[workload]')"
    ) from None
if _mismatch is not None:
    warnings.warn(_mismatch, RuntimeWarning, stacklevel=2)

try:
    from s3torchconnector import S3ClientConfig
    from s3torchconnector._s3client import S3Client
    from s3torchconnector.dcp import (
        BinaryPrefixStrategy,
        DefaultPrefixStrategy,
        HexPrefixStrategy,
        S3FileSystem,
        S3StorageReader,
        S3StorageWriter,
    )
    from s3torchconnector.dcp.s3_prefix_strategy import RoundRobinPrefixStrategy
    from s3torchconnector.s3reader import S3ReaderConstructor
    from s3torchconnectorclient._mountpoint_s3_client import S3Exception
except ImportError as _exc:  # pragma: no cover - only on another s3torchconnector
    raise S3TorchSeamError(
        f"s3torchconnector no longer has a name ckptbench's s3 backend uses ({_exc}); the seam "
        f"was written for {WRITTEN_FOR}"
    ) from _exc

__all__ = [
    "WRITTEN_FOR",
    "BinaryPrefixStrategy",
    "DefaultPrefixStrategy",
    "HexPrefixStrategy",
    "RoundRobinPrefixStrategy",
    "S3Client",
    "S3ClientConfig",
    "S3Exception",
    "S3FileSystem",
    "S3ReaderConstructor",
    "S3StorageReader",
    "S3StorageWriter",
    "inject_client",
    "make_client",
]


def make_client(region: str, endpoint: str | None, config: Any, user_agent: Any = None) -> Any:
    """The library's client, with an endpoint its DCP classes cannot be given (None: AWS's)."""
    return S3Client(region, endpoint=endpoint, s3client_config=config, user_agent=user_agent)


def inject_client(storage: Any, region: str, client: Any, reader_constructor: Any = None) -> Any:
    """Replace the file system a DCP writer or reader built for itself by one over ``client``
    (same path); returns ``storage``. The reader keeps its reader constructor: its
    ``prepare_local_plan`` hands the planned ranges to that very object."""
    fs = S3FileSystem(region, s3_client=client, reader_constructor=reader_constructor)
    path = fs.init_path(storage.path)
    storage.fs = fs
    storage.path = path
    return storage
