"""The one place bench/ imports the published peer: Google's Dataflux DCP writer and reader.

``gcs-torch-dataflux==1.4.0`` (the ``peer`` or ``dataflux`` extra) gives ``GCSDistributedWriter``
/ ``GCSDistributedReader``: DCP's ``FileSystemWriter`` / ``Reader`` whose file system uploads each
DCP file through the XML API's multipart upload (32 MiB parts, 8 threads per file) and downloads
each file whole into memory. They come through the package's seam for the connector
(``workload/storage/dataflux/dataflux_seam.py``), which says what it supplies so that they import
and save as published on google-cloud-storage 3 and torch 2.13; the ``dataflux`` backend of
``ckptbench run`` uses the same classes.
"""

from __future__ import annotations

from typing import Any

from ckptbench.workload.storage.dataflux import dataflux_seam


class PeerMissing(SystemExit):
    pass


def peer_classes() -> tuple[type[Any], type[Any]]:
    """(GCSDistributedWriter, GCSDistributedReader), or a clear exit when the peer is missing."""
    try:
        writer, reader, _ = dataflux_seam.checkpoint_classes()
    except dataflux_seam.DatafluxMissing as exc:
        raise PeerMissing(f"bench_peer needs Google's Dataflux DCP writer: {exc}") from exc
    return writer, reader
