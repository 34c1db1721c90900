"""Runs as the layers below the front doors see them: the cached :class:`RunContext`, the
active statuses, the plan's size, cancelling and the final rollup."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from blockbatch.core.budget import learned_costs, left_text, left_to_do
from blockbatch.core.call_types import Totals
from blockbatch.core.commands import PROG
from blockbatch.core.context import RunContext
from blockbatch.core.outcome import final_status
from blockbatch.core.registry import ModelInfo, priced_elsewhere
from blockbatch.core.run_model import FACTS_MAX_AGE_S, model_from_json, model_json, run_model
from blockbatch.core.run_types import ACTIVE_STATUSES, RunOptions, RunResult, RunStatus
from blockbatch.core.schema import load_schema
from blockbatch.store import model_facts
from blockbatch.store.repo import NotFound


async def save_models(
    conn: asyncpg.Connection | asyncpg.Pool, run_id: str, models: list[ModelInfo]
) -> None:
    """Keep the models a run uses, as its front door resolved them (``runs.models``): what
    every worker's run context reads, so none asks the Models API again."""
    await conn.execute(
        "update runs set models = models || $2::jsonb where run_id = $1",
        run_id,
        {m.id: model_json(m) for m in models},
    )


async def _model(conn: asyncpg.Connection, kept: Mapping[str, Any], name: str) -> ModelInfo:
    """The model ``name`` as the run keeps it; for a run started before models were kept,
    the registry with the Models API facts kept in Postgres (no API call from here)."""
    if name in kept:
        return model_from_json(kept[name])
    return run_model(name, await model_facts.fresh(conn, name, FACTS_MAX_AGE_S))


async def load_run_context(conn: asyncpg.Connection, run_id: str) -> RunContext:
    """A run's options, schema and model, read from Postgres.

    The model is the one the run's front door resolved and kept with the run
    (:func:`save_models`: the registry, the Models API's facts, configured prices). A model
    that retired since the run started is not refused here: its calls are, by the API, and
    say so.

    Raises:
        NotFound: no such run.
        UnknownModelError: a model neither the registry nor configuration prices.
    """
    row = await conn.fetchrow(
        """select r.run_id, r.document_id, r.schema_id, r.settings, r.models, s.definition,
                  s.name
           from runs r join schemas s using (schema_id) where r.run_id = $1""",
        run_id,
    )
    if row is None:
        raise NotFound(f"no run {run_id!r}: list runs with `{PROG} list`")
    options = RunOptions.model_validate(row["settings"])
    definition: dict[str, Any] = dict(row["definition"])
    spec = load_schema(definition, name=row["name"])
    return RunContext(
        run_id=row["run_id"],
        document_id=row["document_id"],
        schema_id=row["schema_id"],
        options=options,
        spec=spec,
        model=await _model(conn, row["models"], options.model),
    )


async def probe_context(conn: asyncpg.Connection, ctx: RunContext) -> RunContext:
    """The context a run's quality probe calls with: ``ctx`` on the probe's model
    (``QualityOptions.probe_model``, with its Models API facts as :func:`load_run_context`
    reads a run's), else ``ctx`` itself."""
    name = ctx.options.quality.probe_model if ctx.options.quality else None
    if name is None:
        return ctx
    return await context_on(conn, ctx, name)


async def context_on(conn: asyncpg.Connection, ctx: RunContext, name: str) -> RunContext:
    """``ctx`` on the model ``name`` as the run keeps it (:func:`save_models`: its limits,
    prices and answer channel): the probe's and an escalation's calls."""
    if name == ctx.model.id:
        return ctx
    kept = await conn.fetchval("select models from runs where run_id = $1", ctx.run_id)
    return ctx.on_model(await _model(conn, kept or {}, name))


_CONTEXTS: dict[str, RunContext] = {}
_CONTEXT_CACHE_SIZE = 256


async def cached_run_context(conn: asyncpg.Connection, run_id: str) -> RunContext:
    """:func:`load_run_context`, cached per process: a run's schema and options never change."""
    ctx = _CONTEXTS.get(run_id)
    if ctx is None:
        ctx = await load_run_context(conn, run_id)
        if len(_CONTEXTS) >= _CONTEXT_CACHE_SIZE:
            _CONTEXTS.pop(next(iter(_CONTEXTS)))
        _CONTEXTS[run_id] = ctx
    return ctx


# ------------------------------------------------------------------ status and plan


async def status_for_share(conn: asyncpg.Connection, run_id: str) -> str | None:
    """The run's status under a share lock (held until the caller's transaction ends).

    :func:`mark_cancelling` waits for that lock, so work started under it while the run
    is active has been recorded before the run reads as cancelling.
    """
    return await conn.fetchval("select status from runs where run_id = $1 for share", run_id)


async def budget_for_share(
    conn: asyncpg.Connection, run_id: str
) -> tuple[str | None, float | None]:
    """:func:`status_for_share`, and the run's budget (``max_cost_usd``; ``None``: none).

    Read from the row, not the cached :class:`RunContext`: a retry may raise the budget.
    """
    row = await conn.fetchrow(
        """select status, (settings->>'max_cost_usd')::float8 as budget from runs
           where run_id = $1 for share""",
        run_id,
    )
    return (None, None) if row is None else (row["status"], row["budget"])


async def lock_run(conn: asyncpg.Connection, run_id: str) -> None:
    """Lock the run row (``for update``) until the caller's transaction ends."""
    await conn.execute("select 1 from runs where run_id = $1 for update", run_id)


@dataclass(frozen=True)
class PlanState:
    """A run's plan as stored: ``pack_count`` is 0 until the run is planned."""

    status: str
    pack_count: int
    blocks_total: int
    #: The error the run ended with (a finished run about to be retried).
    error: str | None = None


async def lock_for_planning(conn: asyncpg.Connection, run_id: str) -> PlanState | None:
    """The run's plan state, row locked ``for update``; ``None`` for an unknown run."""
    row = await conn.fetchrow(
        """select status, pack_count, blocks_total, error from runs where run_id = $1
           for update""",
        run_id,
    )
    return (
        None
        if row is None
        else PlanState(row["status"], row["pack_count"], row["blocks_total"], row["error"])
    )


@dataclass(frozen=True)
class BlockSize:
    """One block of a document as planning sees it."""

    block_uid: str
    block_index: int
    est_tokens: int
    #: ``blockbatch.core.reuse.block_digest`` of the block's type and content.
    content_sha256: str = ""
    block_type: str = ""


async def document_blocks(conn: asyncpg.Connection, document_id: str) -> list[BlockSize]:
    """Every block of a document, in block order."""
    rows = await conn.fetch(
        """select block_uid, block_index, est_tokens, content_sha256, block_type from blocks
           where document_id = $1 order by block_index""",
        document_id,
    )
    return [
        BlockSize(
            r["block_uid"], r["block_index"], r["est_tokens"], r["content_sha256"], r["block_type"]
        )
        for r in rows
    ]


#: How many of a run's blocks reused an earlier answer, and their share of what the calls
#: that answered them cost (each source call's cost over the blocks it carried).
_REUSED_SQL = """
select count(*) as blocks_reused,
       coalesce(sum(c.cost_usd / greatest(cardinality(c.block_uids), 1)), 0)
           as reuse_saved_usd
from overlays o left join llm_calls c on c.call_id = o.reused_from_call_id
where o.run_id = $1 and o.reused_from_run_id is not null
"""


async def save_plan(
    conn: asyncpg.Connection,
    run_id: str,
    pack_count: int,
    block_count: int,
    set_aside: int = 0,
    set_aside_usd: float = 0.0,
) -> Totals:
    """Record the plan's size, what it reused and what it set aside (blocks and their
    estimated cost), and move a new run to ``running``.

    Returns the reuse counters (``blocks_reused``, ``reuse_saved_usd``) as stored.
    """
    row = await conn.fetchrow(
        f"""with r as ({_REUSED_SQL})
           update runs set status = case when status in ('created', 'planning')
               then 'running' else status end,
               pack_count = $2, blocks_total = $3, started_at = coalesce(started_at, now()),
               blocks_reused = r.blocks_reused, reuse_saved_usd = r.reuse_saved_usd,
               blocks_set_aside = $4, set_aside_usd = $5
           from r where run_id = $1
           returning runs.blocks_reused, runs.reuse_saved_usd::float8 as reuse_saved_usd""",
        run_id,
        pack_count,
        block_count,
        set_aside,
        set_aside_usd,
    )
    return Totals(blocks_reused=row["blocks_reused"], reuse_saved_usd=row["reuse_saved_usd"])


async def reuse_totals(conn: asyncpg.Connection, run_id: str) -> Totals:
    """The reuse counters :func:`save_plan` stored (a repeated ``plan_run`` returns them)."""
    row = await conn.fetchrow(
        """select blocks_reused, reuse_saved_usd::float8 as reuse_saved_usd from runs
           where run_id = $1""",
        run_id,
    )
    return Totals(blocks_reused=row["blocks_reused"], reuse_saved_usd=row["reuse_saved_usd"])


async def set_budget(conn: asyncpg.Connection, run_id: str, max_cost_usd: float) -> None:
    """Set the run's budget (``settings.max_cost_usd``): a retry raising it."""
    await conn.execute(
        """update runs set settings = settings || jsonb_build_object('max_cost_usd', $2::float8)
           where run_id = $1""",
        run_id,
        max_cost_usd,
    )


async def reopen_for_retry(conn: asyncpg.Connection, run_id: str, pack_count: int) -> None:
    """A finished run goes back to ``running`` for a retry, its packs now ``pack_count``.

    Its error, end time and cancel request belong to the execution that ended; the retry's
    record (``run_retries``) keeps the status and error it had.
    """
    await conn.execute(
        """update runs set status = 'running', pack_count = $2, error = null,
                  finished_at = null, cancel_requested_at = null
           where run_id = $1""",
        run_id,
        pack_count,
    )


_TOTALS_SQL = """
select (select count(*) from overlays where run_id = $1
            and status in ('ai_complete', 'confirmed', 'rejected')) as blocks_done,
       (select count(*) from overlays where run_id = $1
            and status in ('failed', 'cancelled')) as blocks_failed,
       (select count(*) from split_events where run_id = $1) as splits,
       (select blocks_reused from runs where run_id = $1) as blocks_reused,
       (select reuse_saved_usd::float8 from runs where run_id = $1) as reuse_saved_usd,
       c.*
from (select count(*) filter (where status <> 'started'
                              and coalesce(error_type, '') not in ('canceled', 'expired'))
                 as calls,
             coalesce(sum(input_tokens), 0) as input_tokens,
             coalesce(sum(output_tokens), 0) as output_tokens,
             coalesce(sum(thinking_tokens), 0) as thinking_tokens,
             coalesce(sum(cache_creation_input_tokens), 0) as cache_creation_input_tokens,
             coalesce(sum(cache_read_input_tokens), 0) as cache_read_input_tokens,
             coalesce(sum(cost_usd), 0)::float8 as cost_usd
      from llm_calls where run_id = $1) c
"""


async def current_totals(conn: asyncpg.Connection, run_id: str, packs_done: int) -> Totals:
    """The run's counters now, for a live view that starts part-way (a retry).

    ``blocks_failed`` counts every block that ended without a result (failed or
    cancelled), so that the blocks still to do are the pending ones.
    """
    row = await conn.fetchrow(_TOTALS_SQL, run_id)
    return Totals(**dict(row), packs_done=packs_done)


async def mark_cancelling(conn: asyncpg.Connection, run_id: str, reason: str | None) -> None:
    """Move an active run to ``cancelling``; after this commits no new call starts.

    It waits for the share locks of :func:`status_for_share` held by calls being opened.
    """
    await conn.execute(
        """update runs set status = 'cancelling', error = coalesce(error, $2),
                  cancel_requested_at = coalesce(cancel_requested_at, clock_timestamp())
           where run_id = $1 and status = any($3::text[])""",
        run_id,
        reason,
        list(ACTIVE_STATUSES),
    )


# ------------------------------------------------------------------ rollup

ROLLUP_SQL = f"""
with o as (
    select count(*) filter (where status <> 'set_aside') as total,
           count(*) filter (where status in ('ai_complete', 'confirmed', 'rejected')) as ok,
           count(*) filter (where status = 'failed') as failed,
           count(*) filter (where status = 'cancelled') as cancelled,
           count(*) filter (where status = 'confirmed') as confirmed
    from overlays where run_id = $1),
c as (
    -- A request the provider never processed (a cancelled or expired batch request) is not a call.
    select count(*) filter (where status <> 'started'
                            and coalesce(error_type, '') not in ('canceled', 'expired')) as calls,
           coalesce(sum(input_tokens), 0) as input_tokens,
           coalesce(sum(output_tokens), 0) as output_tokens,
           coalesce(sum(thinking_tokens), 0) as thinking_tokens,
           coalesce(sum(cache_creation_input_tokens), 0) as cache_creation_input_tokens,
           coalesce(sum(cache_read_input_tokens), 0) as cache_read_input_tokens,
           coalesce(sum(cost_usd), 0) as cost_usd
    from llm_calls where run_id = $1),
s as (select count(*) as splits from split_events where run_id = $1),
u as ({_REUSED_SQL})
update runs r set
    status = $2, error = $3, finished_at = now(),
    blocks_total = o.total, blocks_ai_complete = o.ok, blocks_failed = o.failed,
    blocks_cancelled = o.cancelled, blocks_confirmed = o.confirmed,
    calls = c.calls, split_events = s.splits,
    input_tokens = c.input_tokens, output_tokens = c.output_tokens,
    thinking_tokens = c.thinking_tokens,
    cache_creation_input_tokens = c.cache_creation_input_tokens,
    cache_read_input_tokens = c.cache_read_input_tokens, cost_usd = c.cost_usd,
    blocks_reused = u.blocks_reused, reuse_saved_usd = u.reuse_saved_usd
from o, c, s, u
where r.run_id = $1
returning r.run_id, r.status, r.error, r.model, r.blocks_total, r.blocks_ai_complete,
          r.blocks_failed, r.blocks_cancelled, r.pack_count, r.calls, r.split_events,
          r.input_tokens, r.output_tokens, r.thinking_tokens, r.cache_creation_input_tokens,
          r.cache_read_input_tokens, r.cost_usd, r.blocks_reused, r.reuse_saved_usd,
          r.blocks_set_aside, r.set_aside_usd
"""


#: Statuses of a block that ended without a result.
NOT_DONE = ("failed", "cancelled")


async def failure_reasons(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> dict[str, int]:
    """Reason code -> count over the run's failed and cancelled blocks, most frequent first.

    A block without a code (before codes were recorded) counts as ``unknown``.
    """
    rows = await conn.fetch(
        """select coalesce(reason_code, 'unknown') as reason, count(*) as n from overlays
           where run_id = $1 and status = any($2::text[])
           group by 1 order by 2 desc, 1""",
        run_id,
        list(NOT_DONE),
    )
    return {r["reason"]: r["n"] for r in rows}


#: A run's cost so far, the part of it that answered blocks, its first warm-up's cost (what
#: continuing pays again before its first block), its largest reservation, and what its
#: pack calls learned: the largest expected cost of an answered one and the cost spread
#: (``learned_costs``): what a run stopped by its budget has left (``left_to_do``), as
#: ``close_run`` and ``status`` (``store/reads.py``) say it. ``{run}`` is the run id in
#: SQL: ``$1``, or ``r.run_id`` inside a read of ``runs r``.
BUDGET_COSTS_SQL = """
select coalesce(sum(cost_usd), 0)::float8 as spent,
       coalesce(sum(cost_usd) filter (where purpose in ('pack', 'batch_request')), 0)::float8
           as work,
       coalesce((select cost_usd from llm_calls w where w.run_id = {run}
                   and w.purpose = 'warm_up' and w.status = 'succeeded'
                 order by call_id limit 1), 0)::float8 as warm_up,
       coalesce(max(reserved_usd), 0)::float8 as largest_call,
       coalesce(max(expected_usd) filter (where purpose = 'pack' and status = 'succeeded'),
                0)::float8 as largest_expected,
       (select expected_calls from run_ledger_totals t where t.run_id = {run}) as expected_calls,
       (select cost_ratio_sum from run_ledger_totals t where t.run_id = {run}) as ratio_sum,
       (select cost_ratio_sq_sum from run_ledger_totals t where t.run_id = {run}) as ratio_sq
from llm_calls where run_id = {run}
"""

_COUNTS_SQL = """
select count(*) filter (where status <> 'set_aside') as total,
       count(*) filter (where status in ('ai_complete', 'confirmed', 'rejected')) as done,
       count(*) filter (where status = 'failed') as failed,
       count(*) filter (where status = 'cancelled') as cancelled
from overlays where run_id = $1
"""


async def close_run(
    conn: asyncpg.Connection, run_id: str, status: RunStatus, error: str | None
) -> RunResult:
    """Set the run's final status and recompute every counter from Postgres.

    Overlays, the ledger and split events are the source of truth; the counters a
    workflow carried along are not trusted. A run the workflow calls ``completed`` ends in
    the status its blocks say (:func:`final_status`).
    """
    counts = await conn.fetchrow(_COUNTS_SQL, run_id)
    reasons = await failure_reasons(conn, run_id)
    status, error = final_status(
        status,
        error,
        total=counts["total"],
        done=counts["done"],
        failed=counts["failed"],
        cancelled=counts["cancelled"],
        reasons=reasons,
    )
    budget = None
    if status == "budget_exhausted":
        # What is left and what finishing would cost, from the run's own cost per block.
        run = await conn.fetchrow(
            """select (settings->>'max_cost_usd')::float8 as max_cost, blocks_reused from runs
               where run_id = $1""",
            run_id,
        )
        max_cost = run["max_cost"]
        spent = await conn.fetchrow(BUDGET_COSTS_SQL.format(run="$1"), run_id)
        budget = left_to_do(
            max_cost or 0.0,
            spent=spent["spent"],
            work_spent=spent["work"],
            restart_usd=spent["warm_up"],
            largest_call_usd=spent["largest_call"],
            next_call_usd=learned_costs(dict(spent)),
            blocks_done=counts["done"],
            reused=run["blocks_reused"] or 0,
            blocks_left=counts["total"] - counts["done"],
        )
        error = left_text(budget)
    row = await conn.fetchrow(ROLLUP_SQL, run_id, status, error)
    return RunResult.model_validate(
        {
            **dict(row),
            "cost_usd": float(row["cost_usd"]),
            "reuse_saved_usd": float(row["reuse_saved_usd"]),
            "set_aside_usd": float(row["set_aside_usd"]),
            "priced_from_configuration": priced_elsewhere(row["model"]),
            "failure_reasons": reasons,
            "budget": budget,
        }
    )
