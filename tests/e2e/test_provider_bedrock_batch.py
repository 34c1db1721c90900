"""Bedrock batch inference against the local stack: model invocation jobs whose JSONL lives
in a local S3-compatible server (moto's server mode, started by ``Services.start_s3`` only
here), answered by the simulator's ``bedrock`` control plane.
"""

from __future__ import annotations

import os
from pathlib import Path

import boto3

from blockbatch.devtools.services import Services


def test_the_local_s3_server_holds_objects_and_leaves_nothing_behind(tmp_path: Path) -> None:
    services = Services(tmp_path)
    url = services.start_s3()
    try:
        s3 = boto3.client(
            "s3",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
        s3.create_bucket(Bucket="bb-jobs")
        s3.put_object(Bucket="bb-jobs", Key="in/a.jsonl", Body=b'{"recordId": "r1"}\n')
        body = s3.get_object(Bucket="bb-jobs", Key="in/a.jsonl")["Body"].read()
        assert body == b'{"recordId": "r1"}\n'
        pid = int(services.pid_file("s3").read_text())
    finally:
        services.stop()
    assert not services.pid_file("s3").exists()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError(f"the S3 server (pid {pid}) is still running after stop()")
