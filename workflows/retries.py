"""Timeouts and retry policies shared by the workflows: declared once, named for their use.

Batch-mode policies (submitting, polling, collecting Message Batches) live next to the
batch workflow code in ``workflows/batch.py``.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.errors import RUN_STOPPED

#: Rate limits, overload and 5xx are retried here, honouring retry-after (next_retry_delay);
#: an error that stops the run (a rejected key, a spend cap, billing, no such model) is not.
#: A pack's calls start from the run's own first backoff (``RunOptions.call_retry_s``, 2 s
#: unless set: :func:`first_backoff`).
CALL_MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=12,
    non_retryable_error_types=[RUN_STOPPED],
)
#: A call whose max_tokens could run past ten minutes streams (``blockbatch.core.prompt.needs_streaming``),
#: for up to the hour the SDK reckons 128,000 output tokens take; the heartbeat
#: (:data:`CALL_MODEL_HEARTBEAT`) notices a lost worker long before this.
CALL_MODEL_TIMEOUT = timedelta(minutes=65)
#: The warm-up call is worth a few tries (from the run's ``call_retry_s`` too); past them
#: pack 0 goes first instead.
WARM_UP_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_attempts=3,
    non_retryable_error_types=[RUN_STOPPED],
)
#: The probe activity retries its calls itself (core.quality.PROBE_ATTEMPTS each); this
#: covers a lost worker or Postgres, and the pack goes on either way.
QUALITY_PROBE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_attempts=3,
    non_retryable_error_types=[RUN_STOPPED],
)
#: A killed worker is noticed within this time and the call moves to another worker
#: (the planning, escalation and batch calls; a pack's calls take the run's
#: ``RunOptions.call_heartbeat_s``, 20 s unless set).
CALL_MODEL_HEARTBEAT = timedelta(seconds=20)
#: Postgres restarts are waited out, never turned into lost blocks.
DB_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=0,
)
DB_TIMEOUT = timedelta(seconds=60)
#: Planning reads every block of the document once, and a re-plan moves every block not
#: started: minutes for a million blocks on a loaded machine (bench/scale.py). The
#: activities heartbeat (PLAN_HEARTBEAT), so a lost worker is found in a minute.
PLAN_TIMEOUT = timedelta(minutes=30)
PLAN_HEARTBEAT = timedelta(minutes=1)


def first_backoff(policy: RetryPolicy, seconds: float) -> RetryPolicy:
    """``policy`` with its first retry ``seconds`` after the failure (the run's
    ``call_retry_s``); each next one still waits twice as long, up to its maximum."""
    return dataclasses.replace(policy, initial_interval=timedelta(seconds=seconds))
