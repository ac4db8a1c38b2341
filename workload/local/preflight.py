"""Before any rank starts, the storage a run names is checked once: it answers, the credentials
exist, the bucket exists, and an object can be written and deleted under the prefix.

Without it, an unreachable endpoint took 23 s to fail, every rank logging its own retries and
then a table of dashes, and missing credentials printed the same error once a rank. Here the
run fails in seconds with one message naming ``--storage``.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable

import boto3
import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exceptions

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.contract.results.rank import Leftovers
from ckptbench.workload.storage.gcs.client import emulator_host, make_client, split_gs_url

# Long enough for a real bucket across a continent, short enough to say no before anything runs.
PREFLIGHT_SECONDS = 10.0


class PreflightError(RuntimeError):
    """The storage cannot take this run; the message says what to fix."""


def check_gcs(storage: str, project: str | None) -> None:
    """Write and delete one empty object under ``storage`` (gs://bucket/prefix), a transient
    failure tried again (:func:`_with_retries`)."""
    bucket_name, prefix = split_gs_url(storage)
    where = emulator_host() or "storage.googleapis.com"
    try:
        client = make_client(project, pool_size=1)
    except auth_exceptions.DefaultCredentialsError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PreflightError(
            f"--storage {storage}: no Google credentials ({first}); run `gcloud auth "
            "application-default login`, set GOOGLE_APPLICATION_CREDENTIALS, or give no "
            "--storage to use the embedded emulator"
        ) from None
    name = f"{prefix}/.ckptbench-preflight-{secrets.token_hex(4)}".lstrip("/")
    blob = client.bucket(bucket_name).blob(name)
    written = tried = False

    def upload() -> None:
        nonlocal tried
        try:
            again, tried = tried, True
            blob.upload_from_string(
                b"", timeout=PREFLIGHT_SECONDS, retry=None, if_generation_match=0
            )
        except gexc.PreconditionFailed:
            if not again:  # on a retry, the attempt that failed after its write made it: ours
                raise

    def delete() -> None:
        with contextlib.suppress(gexc.NotFound):  # an attempt that failed after the delete
            blob.delete(timeout=PREFLIGHT_SECONDS, retry=None)

    try:
        _with_retries(upload)
        written = True
        _with_retries(delete)
    except gexc.NotFound:
        raise PreflightError(
            f"--storage {storage}: bucket {bucket_name!r} does not exist on {where}"
        ) from None
    except (gexc.Forbidden, gexc.Unauthorized) as exc:
        raise PreflightError(
            f"--storage {storage}: these credentials may not {_act(written)} there ({exc.message})"
            f"{_left(written, storage, f'gs://{bucket_name}/{name}')}"
        ) from None
    except (
        requests.ConnectionError,
        requests.Timeout,
        requests.exceptions.ChunkedEncodingError,
    ) as exc:
        raise PreflightError(
            f"--storage {storage}: cannot reach {where} within {PREFLIGHT_SECONDS:.0f} s "
            f"({type(exc).__name__}){_left(written, storage, f'gs://{bucket_name}/{name}')}"
        ) from None
    except auth_exceptions.GoogleAuthError as exc:
        raise PreflightError(f"--storage {storage}: the credentials were refused ({exc})") from None
    except gexc.GoogleAPICallError as exc:
        raise PreflightError(
            f"--storage {storage}: {where} answered {exc.code}: {exc.message}"
            f"{_left(written, storage, f'gs://{bucket_name}/{name}')}"
        ) from None
    finally:
        client.close()


def _act(written: bool) -> str:
    """What the refused request did: a run needs to delete as well as to write."""
    return "delete" if written else "write"


def _left(written: bool, storage: str, url: str) -> str:
    """What a failed preflight left behind, said: its empty object, when the delete failed, and
    the clean that removes it (which takes a prefix, never a whole bucket)."""
    if not written:
        return ""
    if storage.rstrip("/").count("/") < 3:  # scheme://bucket: no prefix for clean to take
        return f"; its empty test object {url} stays: delete it"
    return "; " + Leftovers(objects=1, under=storage.rstrip("/")).notice()


# A transient answer (429, 5xx, a reset) is retried a few times, as the ranks retry theirs: one
# of them refused a run whose storage was fine.
PREFLIGHT_ATTEMPTS = 3
_TRANSIENT: tuple[type[Exception], ...] = (
    gexc.TooManyRequests,
    gexc.ServerError,
    requests.ConnectionError,
    requests.exceptions.ChunkedEncodingError,  # an answer cut short: the request may have acted
)


def _with_retries(
    call: Callable[[], object], transient: Callable[[Exception], bool] | None = None
) -> None:
    """``call()``, tried again after a transient failure (:data:`_TRANSIENT`, or what
    ``transient`` says is one) up to :data:`PREFLIGHT_ATTEMPTS` times in all."""
    for attempt in range(PREFLIGHT_ATTEMPTS):
        try:
            call()
            return
        except Exception as exc:
            again = transient(exc) if transient is not None else isinstance(exc, _TRANSIENT)
            if not again or attempt + 1 == PREFLIGHT_ATTEMPTS:
                raise
            time.sleep(0.25 * 2**attempt)


def _s3_transient(exc: Exception) -> bool:
    """An S3 answer worth another try: 429 or a 5xx (SlowDown among them). A reset connection
    never reaches here: botocore sends the request again itself, as the test of it shows."""
    import botocore.exceptions as bexc

    if isinstance(exc, bexc.ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return status == 429 or status >= 500
    return False


# An S3 endpoint that takes no connection in this long is refused: a few seconds, before any rank.
S3_CONNECT_SECONDS = 5.0


def check_s3(storage: str, config: WorkloadConfig) -> None:
    """Write and delete one empty object under ``storage`` (s3://bucket/prefix) on the service
    the settings or the AWS variables name, with the standard credential chain; a transient
    answer (429, 5xx) is tried again as the GCS check's is (botocore's own retries are off: its
    standard mode does not take a bare 429 for throttling)."""
    import botocore.exceptions as bexc
    from botocore.config import Config

    from ckptbench.workload.storage.s3.where import resolve, split_s3_url

    where = resolve(config.s3_endpoint, config.s3_region, config.s3_path_style)
    bucket, prefix = split_s3_url(storage)
    client = boto3.session.Session().client(
        "s3",
        endpoint_url=where.endpoint,
        region_name=where.region,
        config=Config(
            s3={"addressing_style": "path" if where.path_style else "auto"},
            retries={"mode": "standard", "max_attempts": 1},
            connect_timeout=S3_CONNECT_SECONDS,
            read_timeout=PREFLIGHT_SECONDS,
        ),
    )
    name = f"{prefix}/.ckptbench-preflight-{secrets.token_hex(4)}".lstrip("/")
    service = where.describe
    written = False
    try:
        _with_retries(lambda: client.put_object(Bucket=bucket, Key=name, Body=b""), _s3_transient)
        written = True
        _with_retries(lambda: client.delete_object(Bucket=bucket, Key=name), _s3_transient)
    except bexc.NoCredentialsError:
        raise PreflightError(
            f"--storage {storage}: no AWS credentials for {service} (set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or run where a role is given; or give no "
            "--storage to use the embedded S3 server)"
        ) from None
    except (bexc.EndpointConnectionError, bexc.ConnectTimeoutError, bexc.ReadTimeoutError) as exc:
        raise PreflightError(
            f"--storage {storage}: cannot reach {service} within {S3_CONNECT_SECONDS:.0f} s "
            f"({type(exc).__name__}){_left(written, storage, f's3://{bucket}/{name}')}"
        ) from None
    except bexc.ClientError as exc:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "?"))
        if code == "NoSuchBucket":
            raise PreflightError(
                f"--storage {storage}: bucket {bucket!r} does not exist on {service}"
            ) from None
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"):
            raise PreflightError(
                f"--storage {storage}: {service} refused the credentials ({code})"
            ) from None
        if code in ("AccessDenied", "403", "AllAccessDisabled"):
            raise PreflightError(
                f"--storage {storage}: these credentials may not {_act(written)} there ({code})"
                f"{_left(written, storage, f's3://{bucket}/{name}')}"
            ) from None
        raise PreflightError(
            f"--storage {storage}: {service} answered {code}: {error.get('Message', '')}"
            f"{_left(written, storage, f's3://{bucket}/{name}')}"
        ) from None
    except bexc.BotoCoreError as exc:
        raise PreflightError(
            f"--storage {storage}: {service}: {exc}"
            f"{_left(written, storage, f's3://{bucket}/{name}')}"
        ) from None
