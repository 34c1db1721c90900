"""Opening a worker's Bedrock batch job client (``activities/bedrock_jobs.py``).

Read from the worker's environment when its first Bedrock batch run needs it: the job
settings (``BLOCKBATCH_BEDROCK_ROLE_ARN``, ``BLOCKBATCH_BEDROCK_S3_URI``, the quotas:
``blockbatch/core/bedrock_batch.py``), the region, and AWS credentials and endpoints where
boto3 reads them (``AWS_PROFILE`` or ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, an
instance role; ``AWS_ENDPOINT_URL_BEDROCK``, ``AWS_ENDPOINT_URL_S3``). S3 takes AWS
credentials: a Bedrock API key alone (``AWS_BEARER_TOKEN_BEDROCK``) runs sync calls, not jobs.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping

from activities.bedrock_jobs import BedrockJobs
from blockbatch.core.bedrock_batch import BedrockBatchConfig
from blockbatch.send.sender import Sender


def open_bedrock_jobs(sender: Sender, env: Mapping[str, str] | None = None) -> BedrockJobs:
    """The job client; a sync part's records go through ``sender``.

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
    from botocore.config import Config

    _redact_botocore_debug_log()

    session = boto3.session.Session(region_name=region)
    # Signed with the AWS credentials S3 needs too, not a Bedrock API key: one identity
    # (the one the role's trust and the bucket's policy name) for both.
    bedrock = session.client("bedrock", config=Config(auth_scheme_preference="sigv4"))
    return BedrockJobs(config, bedrock, session.client("s3"), sender)


#: What of a signed request carries a credential: the SigV4 header (its access key id),
#: a session token, the canonical request's token line.
_SECRETS = re.compile(
    r"(?i)(authorization'?\s*[:=]\s*b?'?|x-amz-security-token'?\s*[:=]\s*b?'?|"
    r"credential=)[^'\s,}]+"
)
#: botocore's loggers that print a request's headers at DEBUG.
_BOTOCORE_LOGGERS = ("botocore.endpoint", "botocore.auth", "botocore.hooks")


class _RedactSignedHeaders(logging.Filter):
    """Blank the credentials in botocore's DEBUG lines (``Sending http request:`` prints
    the request with its ``Authorization`` header, whose SigV4 ``Credential=`` names the
    access key id; ``CanonicalRequest`` holds a session token)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        redacted = _SECRETS.sub(lambda m: m.group(1) + "<redacted>", text)
        if redacted != text:
            record.msg, record.args = redacted, None
        return True


_REDACTOR = _RedactSignedHeaders()


def _redact_botocore_debug_log() -> None:
    """Install the redaction on botocore's request logs, once per process."""
    for name in _BOTOCORE_LOGGERS:
        log = logging.getLogger(name)
        if _REDACTOR not in log.filters:
            log.addFilter(_REDACTOR)
