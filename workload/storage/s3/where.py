"""Where an S3 request goes: endpoint, region and addressing, resolved once the AWS way.

An explicit setting (``s3Endpoint``, ``s3Region``, ``s3PathStyle``) wins; otherwise the AWS
standard variables (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``AWS_DEFAULT_REGION``), which every AWS SDK and the CRT client read too; otherwise AWS itself in
us-east-1. Credentials are never read here: each client takes them from the standard chain
(environment, shared files, IRSA / EKS Pod Identity web identity, instance metadata).
"""

from __future__ import annotations

import ipaddress
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_REGION = "us-east-1"
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")


@dataclass(frozen=True)
class S3Where:
    """An S3 service: ``endpoint`` None means AWS's own for ``region``."""

    endpoint: str | None = None
    region: str = DEFAULT_REGION
    path_style: bool = False

    @property
    def describe(self) -> str:
        return self.endpoint or f"AWS S3 ({self.region})"


def resolve(
    endpoint: str | None = None,
    region: str | None = None,
    path_style: bool = False,
    environ: Mapping[str, str] | None = None,
) -> S3Where:
    env = os.environ if environ is None else environ
    endpoint = endpoint or next((env[v] for v in ENDPOINT_VARIABLES if env.get(v)), None)
    region = region or next((env[v] for v in REGION_VARIABLES if env.get(v)), DEFAULT_REGION)
    # A virtual-hosted address puts the bucket in the host name, which an IP address or
    # localhost cannot take: such an endpoint is path-style whatever was asked.
    return S3Where(endpoint, region, path_style or _needs_path_style(endpoint))


def _needs_path_style(endpoint: str | None) -> bool:
    if endpoint is None:
        return False
    host = urllib.parse.urlsplit(endpoint).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


_configured: S3Where | None = None


def configure(where: S3Where) -> None:
    """Make ``where`` this process's S3 service (a rank: from its settings)."""
    global _configured
    _configured = where


def current() -> S3Where:
    """The configured service, else the one the environment names."""
    return _configured if _configured is not None else resolve()


def split_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b/`` -> (``bucket``, ``a/b``)."""
    if not url.startswith("s3://"):
        raise ValueError(f"not an s3:// URL: {url!r}")
    bucket, _, key = url[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {url!r}")
    return bucket, key.strip("/")
