"""A run's budget checked before anything is created: ``max_cost_usd`` must be a positive
number of dollars and pay for at least the run's first call (blockbatch/core/budget.py).

:meth:`Blockbatch.start_run` and :meth:`Blockbatch.retry` call these before they write
anything or start a workflow, so a budget that cannot work leaves nothing behind.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from blockbatch.core.blocks import is_set_aside
from blockbatch.core.budget import BudgetError, check_minimum, first_call, parse_budget
from blockbatch.core.context import RunContext
from blockbatch.core.registry import ModelInfo, get_model
from blockbatch.core.retry_types import RetryRequest
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema
from blockbatch.core.views import RunInfo
from blockbatch.store import retries, runs

__all__ = ["BudgetError", "check_retry_budget", "check_start_budget"]


async def check_start_budget(
    conn: asyncpg.Connection,
    document_id: str,
    schema_id: str,
    definition: dict[str, Any],
    options: RunOptions,
    model: ModelInfo | None = None,
) -> None:
    """Refuse a budget a new run cannot use (nothing is written either way).

    ``model``: the run's model as the front door resolved it (the Models API's facts,
    configured prices); default: the registry's entry for ``options.model``.

    Raises:
        BudgetError: not a positive number, or below the worst case of the run's first
            call (the message names the smallest budget that works).
    """
    if options.max_cost_usd is None:
        return
    budget = parse_budget(options.max_cost_usd)
    blocks = [
        b
        for b in await runs.document_blocks(conn, document_id)
        if options.include_boilerplate or not is_set_aside(b.block_type)
    ]  # a set-aside block is never sent (activities/db.py plan_run)
    ctx = RunContext(
        run_id="(new run)",
        document_id=document_id,
        schema_id=schema_id,
        options=options,
        spec=load_schema(definition),
        model=model or get_model(options.model),
    )
    what, worst = first_call(ctx, [b.est_tokens for b in blocks])
    check_minimum(budget, worst, what)


async def check_retry_budget(conn: asyncpg.Connection, run: RunInfo, request: RetryRequest) -> None:
    """Refuse a retry whose budget (the new one, else the run's) cannot pay for its first
    call on top of what the run has spent already.

    Raises:
        BudgetError: as :func:`check_start_budget`, counting the run's cost so far.
    """
    if request.max_cost_usd is not None:
        budget: float | None = parse_budget(request.max_cost_usd)
    else:
        budget = run.max_cost_usd
    if budget is None:
        return
    ctx = await runs.load_run_context(conn, run.run_id)
    blocks = await retries.blocks_to_retry(conn, run.run_id, request)
    what, worst = first_call(ctx, [b.est_tokens for b in blocks])
    try:
        check_minimum(budget, worst, what, spent=run.cost_usd)
    except BudgetError as err:
        if request.max_cost_usd is None:
            raise BudgetError(
                f"run {run.run_id} has spent ${run.cost_usd:.4f} of its "
                f"${budget:.4f} budget; raise it with --max-cost: "
                f"{err}"
            ) from None
        raise
