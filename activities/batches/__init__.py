"""Provider batch mode: a run's packs as Anthropic Message Batches, in rounds.

A round is a set of pack attempts (``batch_requests`` rows) submitted together. The
activities form round 1 from the plan (on a cold cache, one lead request that writes the
prompt prefix, its followers round 2), submit a round (one provider batch per 100,000
requests / 256 MB), look at it, cancel it, stream its results into the ledger, and apply
them; whatever is unfinished becomes round n + 1. Only ids and counts cross Temporal.

| module | what |
|---|---|
| ``prewarm.py`` | ``round_plan``: how a round uses the cache (kept); ``prewarm_round``: one sync call writes the prefix before a round, when it pays |
| ``submit.py`` | ``open_batch_run``, ``submit_round``: requests built from Postgres, cut into parts |
| ``create.py`` | one provider batch created exactly once (orphan adoption after a crash) |
| ``watch.py`` | ``poll_round``, ``cancel_round`` |
| ``collect.py`` | ``collect_round``: results into the ledger |
| ``apply.py`` | ``apply_round``: overlays, then ``blockbatch.core.policy.decide`` for each request |
| ``rounds.py`` | a round's membership (``batch_requests``) |

The pure rules (custom_ids, part sizes, ledger rows) are in ``blockbatch/core/batching.py``, the
pack policy in ``blockbatch/core/policy.py``; every statement is in ``blockbatch/store/``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.batches import apply, collect, prewarm, submit, watch
from activities.bedrock_jobs import BedrockBatches, BedrockJobs, BedrockSender
from activities.calls import CallPath
from activities.errors import BATCH_REJECTED
from activities.vertex_jobs import VertexJobs, VertexSender, open_vertex_jobs
from blockbatch.core.batch_types import (
    ApplyRoundInput,
    ApplyRoundOutput,
    BatchRoundInput,
    CollectRoundOutput,
    OpenBatchRunInput,
    OpenBatchRunOutput,
    PollRoundOutput,
    SubmitRoundOutput,
)
from blockbatch.core.call_types import WarmCacheOutput
from blockbatch.send.sender import Sender
from blockbatch.store.runs import cached_run_context

__all__ = ["BATCH_REJECTED", "BatchActivities"]


class BatchActivities:
    """Message Batches activities; built as ``BatchActivities(pool, sender, calls, bedrock)``
    in the worker: ``sender`` is the worker's one :class:`~blockbatch.send.sender.Sender`
    (every batch call goes through it), ``calls`` its one :class:`CallPath` (the
    pre-warm's) and ``bedrock`` opens its Bedrock job client (``activities/bedrock_jobs.py``)
    for the runs on Bedrock, whose batches are model invocation jobs.

    Each activity is a thin method over a plain function of its module.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        sender: Sender,
        calls: CallPath | None = None,
        bedrock: Callable[[], BedrockJobs] | None = None,
    ) -> None:
        self.pool = pool
        self.sender = sender
        self.calls = calls
        #: Opens the worker's Bedrock job client on the first Bedrock batch run.
        self._open_bedrock = bedrock
        self._bedrock: BedrockJobs | None = None
        self._vertex: VertexJobs | None = None

    async def _sender(self, run_id: str) -> Sender:
        """The sender a run's batches go through: the worker's, or, for a Bedrock run,
        one whose batches are its model invocation jobs."""
        async with self.pool.acquire() as conn:
            ctx = await cached_run_context(conn, run_id)
        if ctx.options.provider == "vertex":
            return await self._vertex_sender(ctx)
        if ctx.options.provider != "bedrock":
            return self.sender
        if self._bedrock is None:
            if self._open_bedrock is None or self.calls is None:
                raise ApplicationError(
                    "this worker cannot run Amazon Bedrock batch jobs (it was built without them)",
                    type=BATCH_REJECTED,
                    non_retryable=True,
                )
            try:
                self._bedrock = self._open_bedrock()
            except ValueError as err:  # the settings' message: what to set
                raise ApplicationError(
                    f"this worker cannot run Amazon Bedrock batch jobs: {err}",
                    type=BATCH_REJECTED,
                    non_retryable=True,
                ) from None
        route = ctx.route
        assert self.calls is not None
        endpoint = await self.sender.endpoint(route)
        return BedrockSender(
            self.sender, BedrockBatches(self._bedrock, ctx.model.id, route, endpoint)
        )

    async def _vertex_sender(self, ctx: Any) -> Sender:
        """A Vertex run's sender: its batches are batch prediction jobs
        (``activities/vertex_jobs.py``), through the worker's Vertex client."""
        if self._vertex is None:
            try:
                self._vertex = open_vertex_jobs(self.sender)
            except (ValueError, AttributeError, ApplicationError) as err:
                # What to set (the settings' message); never a credential.
                raise ApplicationError(
                    "this worker cannot run Vertex batch prediction jobs: "
                    + (err.message if isinstance(err, ApplicationError) else str(err)),
                    type=BATCH_REJECTED,
                    non_retryable=True,
                ) from None
        route = ctx.route
        endpoint = await self.sender.endpoint(route)
        return VertexSender(self.sender, self._vertex, route, ctx.model.id, endpoint)

    @activity.defn
    async def prewarm_round(self, inp: BatchRoundInput) -> WarmCacheOutput:
        """Write the prompt prefix with one sync call before a round, when that pays."""
        if self.calls is None:
            raise RuntimeError("BatchActivities was built without the worker's CallPath")
        return await prewarm.prewarm_round(self.calls, inp)

    @activity.defn
    async def open_batch_run(self, inp: OpenBatchRunInput) -> OpenBatchRunOutput:
        """Form round 1 from the plan: one request per planned pack (idempotent)."""
        return await submit.open_batch_run(self.pool, inp)

    @activity.defn
    async def submit_round(self, inp: BatchRoundInput) -> SubmitRoundOutput:
        """Submit a round as provider batches; a retry returns the batches already made."""
        return await submit.submit_round(self.pool, await self._sender(inp.run_id), inp)

    @activity.defn
    async def poll_round(self, inp: BatchRoundInput) -> PollRoundOutput:
        """Look at the round's provider batches and record their state."""
        return await watch.poll_round(self.pool, await self._sender(inp.run_id), inp)

    @activity.defn
    async def cancel_round(self, inp: BatchRoundInput) -> PollRoundOutput:
        """Cancel the round's unfinished provider batches; what already ran is kept."""
        return await watch.cancel_round(self.pool, await self._sender(inp.run_id), inp)

    @activity.defn
    async def collect_round(self, inp: BatchRoundInput) -> CollectRoundOutput:
        """Stream the ended batches' results into the ledger (resumes where it stopped)."""
        return await collect.collect_round(self.pool, await self._sender(inp.run_id), inp)

    @activity.defn
    async def apply_round(self, inp: ApplyRoundInput) -> ApplyRoundOutput:
        """Apply each answer, then schedule round n + 1 from the rest."""
        return await apply.apply_round(self.pool, inp)
