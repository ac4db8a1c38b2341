"""``ckptbench clean s3://bucket/prefix``: lists (--dry-run) or removes every object and aborts
every unfinished multipart upload under the prefix, and nothing beside it."""

from __future__ import annotations

import pytest

from ckptbench.workload.storage import clean
from ckptbench.workload.storage.s3 import objects

pytestmark = pytest.mark.timeout(60)


def test_clean_lists_then_removes_objects_and_unfinished_uploads(
    s3_bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    s3 = objects.client()
    # A dead run's checkpoint files (one in a prefix strategy's folder), its result, and what is
    # not ckptbench's beside them: only the run layout goes.
    ckpt = "dead/run-1/checkpoints/ckpt_0.ckpt"
    ours = (f"{ckpt}/.metadata", f"{ckpt}/7/__1_0.distcp", "dead/run-1/results/rank-00000.json")
    for key in (*ours, "dead/notes.txt", "alive/keep.json"):
        s3.put_object(Bucket=s3_bucket, Key=key, Body=b"data")
    unfinished = "dead/run-1/checkpoints/ckpt_1.ckpt/__0_0.distcp"
    upload = s3.create_multipart_upload(Bucket=s3_bucket, Key=unfinished)
    s3.upload_part(
        Bucket=s3_bucket,
        Key=unfinished,
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=b"x" * 1024,
    )
    url = f"s3://{s3_bucket}/dead"

    assert clean.main([url, "--dry-run"]) == 0
    out = capsys.readouterr().out
    for key in ours:
        assert f"s3://{s3_bucket}/{key}" in out, out
    assert "notes.txt" not in out.split("would be deleted")[0].replace("other file", ""), out
    rel = unfinished.removeprefix("dead/")
    assert f"unfinished multipart upload {upload['UploadId']} of {rel}" in out, out
    assert "3 object(s)" in out and "1 unfinished multipart upload(s) would be aborted" in out
    assert len(objects.list_names(url)) == 4 and len(objects.unfinished_uploads(url)) == 1

    assert clean.main([url]) == 0
    out = capsys.readouterr().out
    assert "deleted 3 object(s)" in out and "aborted 1 unfinished" in out, out
    assert objects.list_names(url) == ["notes.txt"]
    assert objects.unfinished_uploads(url) == []
    assert objects.list_names(f"s3://{s3_bucket}/alive") == ["keep.json"]


def test_clean_refuses_a_whole_bucket_and_a_bad_bucket_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert clean.main(["s3://some-bucket"]) == 2
    assert "whole bucket" in capsys.readouterr().err
    assert clean.main(["s3://Bad_Bucket/x"]) == 2
    assert "not a bucket name" in capsys.readouterr().err
