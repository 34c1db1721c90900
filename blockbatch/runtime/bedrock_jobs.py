"""Opening a worker's Bedrock batch job client (``activities/bedrock_jobs.py``).

Read from the worker's environment when its first Bedrock batch run needs it: the job
settings (``BLOCKBATCH_BEDROCK_ROLE_ARN``, ``BLOCKBATCH_BEDROCK_S3_URI``, the quotas:
``blockbatch/core/bedrock_batch.py``), the region, and AWS credentials and endpoints where
boto3 reads them (``AWS_PROFILE`` or ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, an
instance role; ``AWS_ENDPOINT_URL_BEDROCK``, ``AWS_ENDPOINT_URL_S3``). S3 takes AWS
credentials: a Bedrock API key alone (``AWS_BEARER_TOKEN_BEDROCK``) runs sync calls, not jobs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from activities.bedrock_jobs import BedrockJobs
from blockbatch.core.bedrock_batch import BedrockBatchConfig


def open_bedrock_jobs(
    runtime: Callable[[], Any], env: Mapping[str, str] | None = None
) -> BedrockJobs:
    """The job client, with ``runtime`` opening the InvokeModel client of sync parts.

    Raises:
        ValueError: a setting is missing or malformed, or boto3 is not installed (the
            message says what to set or install; it never holds a credential).
    """
    env = os.environ if env is None else env
    config = BedrockBatchConfig.from_env(env)
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if not region:
        raise ValueError("Bedrock batch jobs need AWS_REGION (the region of the model)")
    try:
        import boto3
    except ModuleNotFoundError:
        raise ValueError(
            "Bedrock batch jobs need boto3, which is not installed: "
            "pip install 'blockbatch[bedrock]'"
        ) from None
    session = boto3.session.Session(region_name=region)
    return BedrockJobs(config, session.client("bedrock"), session.client("s3"), runtime)
