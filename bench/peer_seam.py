"""The one place bench/ imports the published peer: Google's Dataflux DCP writer and reader.

``gcs-torch-dataflux==1.4.0`` (the ``peer`` extra; ``.ci/run`` does not install it) gives
``GCSDistributedWriter`` / ``GCSDistributedReader``: DCP's ``FileSystemWriter`` / ``Reader`` whose
file system uploads each DCP file through the XML API's multipart upload (32 MiB parts, 8 threads
per file) and downloads each file whole into memory.

Why a seam: the peer's ``multipart_upload/multipart.py`` imports
``_api_core_retry_to_resumable_media_retry`` from ``google.cloud.storage._helpers`` and
``google.cloud.storage.transfer_manager``, private helpers google-cloud-storage 3 removed (the
project runs 3.x; 2.x had them), so the peer cannot be imported as published. The helper only
turns an ``api_core`` retry into the ``google.resumable_media.RetryStrategy`` the peer puts on its
upload parts (the peer still uses the separate google-resumable-media package, which 3.x keeps
installed). Before importing the peer this module supplies that helper, as google-cloud-storage
2.x defined it, where it is missing; with a 2.x install nothing is changed.

And torch 2.13's ``FileSystemWriter`` closes each file's stream inside its ``with create_stream``
block, so the peer's ``DatafluxCheckpointBuffer.close`` (which uploads, then closes the buffer)
runs twice and the second call fails on the closed buffer ("I/O operation on closed file"): no
save completes. A second close is made a no-op, as ``io.IOBase.close`` is; the first still
uploads exactly as published. lightning itself installs and imports against torch 2.13.0.
"""

from __future__ import annotations

import importlib
from typing import Any

_HELPER = "_api_core_retry_to_resumable_media_retry"


class PeerMissing(SystemExit):
    pass


def _retry_strategy(retry: Any, num_retries: int | None = None) -> Any:
    """google-cloud-storage 2.x's conversion of an api_core retry, for the peer's parts."""
    from google import resumable_media

    strategy: Any = resumable_media.RetryStrategy  # the package has no type hints
    if retry is not None and num_retries is not None:
        raise ValueError("num_retries and retry arguments are mutually exclusive")
    if retry is not None:
        return strategy(
            max_sleep=retry._maximum,
            max_cumulative_retry=getattr(retry, "_timeout", None) or retry._deadline,
            initial_delay=retry._initial,
            multiplier=retry._multiplier,
        )
    return strategy(max_retries=num_retries or 0)


def peer_classes() -> tuple[type[Any], type[Any]]:
    """(GCSDistributedWriter, GCSDistributedReader), or a clear exit when the peer is missing."""
    try:
        importlib.import_module("dataflux_pytorch")
    except ImportError as exc:
        raise PeerMissing(
            "bench_peer needs Google's Dataflux DCP writer (gcs-torch-dataflux==1.4.0): "
            "install the peer extra with\n  .venv/bin/python -m pip install -c constraints.txt "
            f"-e '.[workload,operator,dev,peer]'\n({exc})"
        ) from exc
    for name in ("google.cloud.storage._helpers", "google.cloud.storage.transfer_manager"):
        module = importlib.import_module(name)
        if not hasattr(module, _HELPER):
            setattr(module, _HELPER, _retry_strategy)
    buffer = importlib.import_module(
        "dataflux_pytorch.dataflux_checkpoint"
    ).DatafluxCheckpointBuffer
    if not getattr(buffer.close, "_closes_once", False):
        upload_and_close = buffer.close

        def close_once(self: Any) -> None:
            if not self.closed:
                upload_and_close(self)

        close_once._closes_once = True  # type: ignore[attr-defined]
        buffer.close = close_once
    gcs_filesystem = importlib.import_module("dataflux_pytorch.lightning.gcs_filesystem")
    return gcs_filesystem.GCSDistributedWriter, gcs_filesystem.GCSDistributedReader
