"""Backend s3 (s3torchconnector's DCP classes) through a rank's storage session against a real S3
server: the endpoint reaches the library's client only through the seam, every prefix strategy
and reader round-trips, and cleanup finds a rank's objects wherever the strategy put them."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from pydantic import ValidationError
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ckptbench.workload.contract.config import WorkloadConfig
from ckptbench.workload.local.s3_server import S3Server
from ckptbench.workload.storage import timing
from ckptbench.workload.storage.s3 import objects, s3torch_seam, where
from ckptbench.workload.storage.session import StorageSession

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("quiet_dcp")]


def config(bucket: str, **overrides: Any) -> WorkloadConfig:
    values: dict[str, Any] = {
        "checkpoint_path": f"s3://{bucket}/bench",
        "backend": "s3",
        "world_size": 1,
        "layer_size": 300,
        "padding_size": 3,
    }
    values.update(overrides)
    return WorkloadConfig.model_validate(values)


def round_trip(session: StorageSession, checkpoint_id: str) -> None:
    state = {"a": torch.rand(700, 1000), "b": torch.arange(10), "c": torch.rand(3, 3)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # DCP: no process group, one process
        writer = timing.timed_writer(session.writer(checkpoint_id))
        dcp_save(state, storage_writer=writer, no_dist=True)
        out = {k: torch.zeros_like(v) for k, v in state.items()}
        reader = timing.timed_reader(session.reader(checkpoint_id))
        dcp_load(out, storage_reader=reader, no_dist=True)
    for key, value in state.items():
        assert torch.equal(out[key], value), key
    assert writer.phases.io is not None and writer.phases.io > 0
    assert reader.phases.io is not None and reader.phases.io > 0


def test_the_endpoint_of_the_settings_reaches_the_library_client(
    s3_server: S3Server, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No AWS_ENDPOINT_URL: only s3Endpoint names the server, so the DCP classes, which take no
    # endpoint, reach it only through the client the seam injects.
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    session = StorageSession(config(s3_bucket, s3_endpoint=s3_server.url))
    round_trip(session, f"s3://{s3_bucket}/bench/ckpt")
    names = objects.list_names(f"s3://{s3_bucket}/bench/ckpt")
    assert names == [".metadata", "__0_0.distcp"], names
    assert session.setup_seconds > 0


@pytest.mark.parametrize(
    ("strategy", "folder"),
    [("none", ""), ("round-robin", "0/"), ("binary", "0000000000/"), ("hex", "0000000000/")],
)
@pytest.mark.parametrize("reader", ["dcp-optimized", "sequential", "ranged"])
def test_every_prefix_strategy_and_reader_round_trips_and_cleans_up(
    s3_bucket: str, strategy: str, folder: str, reader: str
) -> None:
    c = config(s3_bucket, s3_prefix_strategy=strategy, s3_reader=reader, s3_threads=2)
    session = StorageSession(c)
    checkpoint = f"s3://{s3_bucket}/bench/{strategy}-{reader}"
    round_trip(session, checkpoint)
    names = objects.list_names(checkpoint)
    # Two writer threads: two data objects for the rank, in the strategy's folder.
    assert sorted(n for n in names if n != ".metadata") == [
        f"{folder}__0_0.distcp",
        f"{folder}__0_1.distcp",
    ], names
    # The rank's own cleanup finds its objects inside the strategy's folder.
    assert session.delete_prefix(checkpoint, "__0_") == 2
    assert objects.list_names(checkpoint) == [".metadata"]
    session.delete_prefix(checkpoint)
    assert objects.list_names(checkpoint) == []


def test_a_failed_sample_s_objects_and_unfinished_upload_are_discarded(s3_bucket: str) -> None:
    session = StorageSession(config(s3_bucket))
    checkpoint = f"s3://{s3_bucket}/bench/failed"
    round_trip(session, checkpoint)
    s3 = objects.client()
    upload = s3.create_multipart_upload(Bucket=s3_bucket, Key="bench/failed/__0_1.distcp")
    assert objects.unfinished_uploads(checkpoint) == [("__0_1.distcp", upload["UploadId"])]
    assert session.discard_failed([checkpoint], rank=0, seconds=10) is None
    assert objects.list_names(checkpoint) == []
    assert objects.unfinished_uploads(checkpoint) == []


def test_resolution_follows_settings_then_aws_variables_then_defaults() -> None:
    env = {"AWS_ENDPOINT_URL": "https://minio.example:9000", "AWS_DEFAULT_REGION": "eu-west-3"}
    assert where.resolve(environ=env) == where.S3Where(
        "https://minio.example:9000", "eu-west-3", False
    )
    env["AWS_ENDPOINT_URL_S3"] = "https://s3.example"
    assert where.resolve(environ=env).endpoint == "https://s3.example"
    explicit = where.resolve("http://10.1.2.3:9000", "us-west-2", environ=env)
    # An IP address cannot carry a bucket in its host name: path style, whatever was asked.
    assert explicit == where.S3Where("http://10.1.2.3:9000", "us-west-2", True)
    assert where.resolve(environ={}) == where.S3Where(None, "us-east-1", False)
    assert where.resolve("http://localhost:9000", environ={}).path_style
    assert where.resolve(path_style=True, environ={}).path_style


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("s3://ab/x", "3 to 63 characters"),
        ("s3://" + "a" * 64 + "/x", "3 to 63 characters"),
        ("s3://My-Bucket/x", "lowercase"),
        ("s3://a..b/x", "two dots"),
        ("s3://192.168.1.1/x", "IP addresses"),
        ("s3://xn--abc/x", "reserves"),
        ("s3://-abc/x", "start and end"),
    ],
)
def test_bucket_names_break_s3_rules_are_refused_by_field(path: str, why: str) -> None:
    with pytest.raises(ValidationError) as info:
        config("unused", checkpoint_path=path)
    text = str(info.value)
    assert "checkpoint_path" in text and why in text, text


def test_a_backend_and_its_scheme_must_agree() -> None:
    with pytest.raises(
        ValidationError, match=r"must be s3://bucket/prefix for backend s3 or s3fs .*backend=s3fs"
    ):
        config("unused", checkpoint_path="gs://bucket/x", backend="s3fs")
    with pytest.raises(
        ValidationError,
        match=r"must be gs://bucket/prefix for backend gcs, gcsfs or dataflux .*backend=gcs",
    ):
        config("bucket", backend="gcs")
    with pytest.raises(ValidationError, match=r"backend file takes .* not a s3:// URL"):
        config("bucket", backend="file")


def test_the_seam_warns_on_another_version() -> None:
    assert s3torch_seam.check_version("1.5.0") is None
    text = s3torch_seam.check_version("1.6.0")
    assert text is not None and "1.5.0" in text and "1.6.0" in text
