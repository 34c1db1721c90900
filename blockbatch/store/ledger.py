"""The LLM call ledger (``llm_calls``, ``prompt_prefixes``): every request and every answer.

Pay once: an answer is written here before anything parses it, and a pack attempt that
already has a ``succeeded`` row is answered from it instead of calling again. A call is
opened only while the run is active, under a share lock on the run row (see
:func:`open_call`). Never the API key. A call sent with short ids keeps its alias map
(alias -> block_uid, ``block_aliases``) on its row from the moment it is opened: the only
place an answer's aliases are mapped back from (:func:`answer_to_apply`). The ledger rows of batch requests are opened
and completed with their round, in ``blockbatch/store/batches.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import asyncpg
from pydantic import ConfigDict

from blockbatch.core.budget import Spread, verdict
from blockbatch.core.call_types import ApplyResultsOutput
from blockbatch.core.endpoint import Endpoint
from blockbatch.core.registry import TokenCounts, Usage
from blockbatch.core.run_types import ACTIVE_STATUSES
from blockbatch.store.runs import budget_for_share

_ANSWER_COLUMNS = """call_id, block_uids, stop_reason, input_tokens, output_tokens,
                     cache_creation_input_tokens, cache_read_input_tokens, cost_usd,
                     thinking_tokens"""


@dataclass(frozen=True)
class Origin:
    """The Temporal workflow and activity that made a call (recorded with it)."""

    workflow_id: str | None
    workflow_run_id: str | None
    activity_id: str
    activity_attempt: int


class OverBudget(Exception):
    """The run's budget cannot hold this call now; nothing was written.

    ``wait``: it would fit once the run's open calls are answered (try again shortly);
    otherwise the budget is exhausted.
    """

    def __init__(
        self, budget: float, recorded: float, open_reserved: float, need: float, wait: bool
    ) -> None:
        super().__init__(
            f"budget ${budget:.4f}: ${recorded:.4f} recorded, "
            f"${open_reserved:.4f} open, this call up to ${need:.4f}"
        )
        self.budget, self.recorded, self.open_reserved = budget, recorded, open_reserved
        self.need, self.wait = need, wait


async def lock_budget(conn: asyncpg.Connection, run_id: str) -> None:
    """Take the run's budget lock until the transaction ends (taken again: a no-op)."""
    await conn.execute("select pg_advisory_xact_lock(hashtextextended($1, 11))", f"budget:{run_id}")


async def budget_use(conn: asyncpg.Connection, run_id: str) -> tuple[float, float]:
    """``(recorded, open)``: what the run's ledger holds against its budget, under the run's
    budget lock (held until the transaction ends; see :func:`_reserve`).

    Read from the run's running totals (``run_ledger_totals``, kept by migration 035's
    triggers in the transaction of every ledger write): one row, however many calls the run
    made. Recorded: settled calls at their cost, a call lost with its worker at the most it
    may have cost; open: what the calls still open reserved.
    """
    await lock_budget(conn, run_id)
    row = await conn.fetchrow(
        """select recorded_usd::float8 as recorded, open_reserved_usd::float8 as open_reserved
           from run_ledger_totals where run_id = $1""",
        run_id,
    )
    if row is None:
        return 0.0, 0.0
    return row["recorded"], row["open_reserved"]


async def _reserve(
    conn: asyncpg.Connection, run_id: str, budget: float | None, need: float | None
) -> float | None:
    """Reserve what a call needs against the run's budget (inside the opening transaction).

    Budget decisions of one run are serialised by a transaction-scoped advisory lock taken
    only when the run has a budget, so a run without one pays nothing. It is taken after
    the run row's share lock (every path takes the two in that order), and the run row is
    not locked ``for update``: opening calls keep sharing it, and ``mark_cancelling`` still
    waits for them. The recorded cost (a call lost with its worker, ``abandoned``, at its
    worst case: it may have been paid), plus the reservations of the run's calls still
    open, plus ``need`` (a pack call's expected cost with its margin, or a worst case:
    ``blockbatch/core/budget.py``) must stay within the budget.

    Returns:
        What to record as the call's ``reserved_usd`` (``None``: no budget).

    Raises:
        OverBudget: the call does not fit; nothing is written.
    """
    if budget is None or need is None:
        return None
    recorded, open_reserved = await budget_use(conn, run_id)
    decided = verdict(budget, recorded=recorded, open_reserved=open_reserved, need=need)
    if decided != "fits":
        raise OverBudget(budget, recorded, open_reserved, need, wait=decided == "wait")
    return need


class Answer(TokenCounts):
    """A recorded answer: what a caller reports of it (the response stays here)."""

    model_config = ConfigDict(frozen=True)

    call_id: int
    block_uids: list[str]
    stop_reason: str | None
    cost_usd: float

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Answer:
        return cls(
            call_id=row["call_id"],
            block_uids=list(row["block_uids"]),
            stop_reason=row["stop_reason"],
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            cache_creation_input_tokens=row["cache_creation_input_tokens"],
            cache_read_input_tokens=row["cache_read_input_tokens"],
            thinking_tokens=row["thinking_tokens"],
            cost_usd=float(row["cost_usd"]),
        )


async def recorded_answer(
    conn: asyncpg.Connection, run_id: str, pack_path: str, pack_attempt: int
) -> Answer | None:
    """The answer this pack attempt already received, if any (pay once)."""
    row = await conn.fetchrow(
        f"""select {_ANSWER_COLUMNS}
            from llm_calls where run_id = $1 and pack_path = $2 and pack_attempt = $3
              and status = 'succeeded'""",
        run_id,
        pack_path,
        pack_attempt,
    )
    return None if row is None else Answer.from_row(row)


async def endpoint_answered(conn: asyncpg.Connection, run_id: str, host: str | None) -> bool:
    """Whether the endpoint at ``host`` (``None``: Anthropic's own) ever answered one of the
    run's calls, with anything: an answer or an error status."""
    return bool(
        await conn.fetchval(
            """select exists(select 1 from llm_calls where run_id = $1
                   and http_status is not null and endpoint_host is not distinct from $2)""",
            run_id,
            host,
        )
    )


async def save_prefix(conn: asyncpg.Connection, sha256: str, system: Any, tools: Any) -> None:
    """Keep a system prompt and tools once, by hash (the ledger rows refer to it)."""
    await conn.execute(
        """insert into prompt_prefixes (sha256, system, tools) values ($1, $2, $3)
           on conflict do nothing""",
        sha256,
        system,
        tools,
    )


async def open_call(
    conn: asyncpg.Connection,
    *,
    run_id: str,
    pack_path: str,
    pack_attempt: int,
    block_uids: list[str],
    model: str,
    prefix: tuple[str, Any, Any],
    request: dict[str, Any],
    origin: Origin,
    purpose: str = "pack",
    provider: str = "anthropic",
    est_output_tokens: int | None = None,
    block_aliases: dict[str, str] | None = None,
    worst_case_usd: float | None = None,
    endpoint: Endpoint | None = None,
    expected_usd: float | None = None,
    reserve_usd: float | None = None,
) -> int | None:
    """Insert a ``started`` ledger row for a call about to be sent, unless the run stopped.

    In one transaction holding a share lock on the run row: ``mark_cancelling`` waits
    for it, so a call is either recorded before the run reads as cancelling or never
    starts. A ``started`` row this same activity attempt opened before (its connection
    dropped before the insert was confirmed) is reused: nothing was sent for it. Any other
    ``started`` row of the same pack attempt lost its worker mid-call and is marked
    ``abandoned``. A run with a budget reserves the call's worst case first (see
    :func:`_reserve`).

    Args:
        conn: the connection.
        run_id, pack_path, pack_attempt: the pack attempt.
        block_uids: the blocks sent.
        model: the model id.
        prefix: ``(sha256, system, tools)`` of the cached prompt prefix.
        request: the request without system and tools.
        origin: the workflow and activity making the call.
        purpose, provider: what the call is for (``pack``) and whom it goes to; the
            Messages API (batch requests are opened in ``blockbatch/store/batches.py``).
        est_output_tokens: the planner's estimate of the answer's output tokens.
        block_aliases: the short ids the request names the blocks by (alias ->
            block_uid); ``None`` when it names them by block_uid.
        worst_case_usd: the most this call can cost (blockbatch/core/budget.py): reserved
            against the run's budget when it has one and no ``reserve_usd`` is given, and
            what the call counts if it is lost with its worker.
        expected_usd: what the call is expected to cost (``None``: not known yet).
        reserve_usd: what to reserve against the budget (blockbatch/core/budget.py
            ``reservation``); ``None``: the worst case.
        endpoint: who answers (blockbatch/core/endpoint.py): its provider replaces ``provider``, and
            its host is kept when it is not Anthropic's own API.

    Returns:
        The new ``call_id``; ``None`` when the run is no longer active (do not call).

    Raises:
        OverBudget: the run's budget cannot hold the call (nothing written).
    """
    async with conn.transaction():
        status, budget = await budget_for_share(conn, run_id)
        if status not in ACTIVE_STATUSES:
            return None
        if budget is not None:
            # Before any write that moves the run's totals row: every path takes the budget
            # lock, then the totals row (a trigger's), in that order.
            await lock_budget(conn, run_id)
        await save_prefix(conn, *prefix)
        # This very activity attempt opened a row already and lost its connection before
        # hearing back (Postgres restarting): nothing was sent for it, so it is this call.
        mine = await conn.fetchval(
            """update llm_calls set block_uids = $4, request = $5, est_output_tokens = $9,
                      block_aliases = $10
               where run_id = $1 and pack_path = $2 and pack_attempt = $3
                 and status = 'started' and workflow_run_id is not distinct from $6
                 and activity_id = $7 and activity_attempt = $8
               returning call_id""",
            run_id,
            pack_path,
            pack_attempt,
            block_uids,
            request,
            origin.workflow_run_id,
            origin.activity_id,
            origin.activity_attempt,
            est_output_tokens,
            block_aliases,
        )
        if mine is not None:
            return int(mine)
        await mark_abandoned(conn, run_id, pack_path, pack_attempt)
        reserved = await _reserve(
            conn, run_id, budget, reserve_usd if reserve_usd is not None else worst_case_usd
        )
        return await conn.fetchval(
            """insert into llm_calls (run_id, pack_path, pack_attempt, block_uids, model,
                   prefix_sha256, request, status, workflow_id, workflow_run_id,
                   activity_id, activity_attempt, purpose, provider, api, est_output_tokens,
                   block_aliases, reserved_usd, endpoint_host, expected_usd, worst_usd)
               values ($1, $2, $3, $4, $5, $6, $7, 'started', $8, $9, $10, $11, $12, $13,
                       'messages', $14, $15, $16, $17, $18, $19)
               returning call_id""",
            run_id,
            pack_path,
            pack_attempt,
            block_uids,
            model,
            prefix[0],
            request,
            origin.workflow_id,
            origin.workflow_run_id,
            origin.activity_id,
            origin.activity_attempt,
            purpose,
            endpoint.provider if endpoint else provider,
            est_output_tokens,
            block_aliases,
            reserved,
            endpoint.host if endpoint else None,
            expected_usd if budget is not None else None,
            worst_case_usd if budget is not None else None,
        )


class Observed(NamedTuple):
    """How a run's answered pack calls compare with the planner's estimates so far."""

    #: Answered pack calls (in full: a truncated answer says only "more") and their blocks.
    calls: int
    blocks: int
    #: Answer tokens written (thinking left out) per answer token estimated.
    ratio: float
    #: Thinking tokens per call (``None``: no call of the run thought).
    thinking: float | None = None
    #: What the run's answered pack calls cost against what they were expected to cost
    #: (``blockbatch.core.budget.Spread``; ``None``: no call was reserved at an expected cost).
    spread: Spread | None = None


async def observed_output(conn: asyncpg.Connection, run_id: str) -> Observed | None:
    """How a run's answers compare with the planner's estimates so far, and how much its
    calls think (thinking is billed as output but is not the answers: it is learned per
    call, the answers per estimated token); ``None`` before any answered pack call.

    Thinking is counted over every answered pack call, a truncated one too (thinking that
    ran into max_tokens is what the allowance must learn most); the answers over the calls
    that wrote them in full. One row of running totals (migration 035), however many calls
    the run made.
    """
    row = await conn.fetchrow(
        """select full_calls, full_blocks, written_tokens, est_tokens, answered_calls,
                  thinking_tokens, expected_calls, cost_ratio_sum, cost_ratio_sq_sum
           from run_ledger_totals where run_id = $1""",
        run_id,
    )
    if row is None or not row["full_calls"] or not row["est_tokens"]:
        return None
    thinking = int(row["thinking_tokens"])
    n = int(row["expected_calls"])
    return Observed(
        int(row["full_calls"]),
        int(row["full_blocks"]),
        float(row["written_tokens"]) / float(row["est_tokens"]),
        thinking / int(row["answered_calls"]) if thinking else None,
        Spread.of(n, row["cost_ratio_sum"], row["cost_ratio_sq_sum"]) if n else None,
    )


async def prefix_cached_s(conn: asyncpg.Connection, run_id: str) -> float | None:
    """Seconds since an answer of the run last read or wrote its prompt prefix in the cache
    (``None``: never); from the run's running totals."""
    return await conn.fetchval(
        """select extract(epoch from now() - prefix_cached_at)::float8
           from run_ledger_totals where run_id = $1""",
        run_id,
    )


async def open_probe(
    conn: asyncpg.Connection,
    *,
    run_id: str,
    model: str,
    request: dict[str, Any],
    origin: Origin,
    worst_case_usd: float | None = None,
    endpoint: Endpoint | None = None,
) -> int | None:
    """Insert a ``started`` row for a probe of the API (purpose ``probe``), numbered in order.

    A probe is the one call a paused run makes to learn whether Claude is back; it holds no
    blocks (``pack_path`` ``probe``, ``pack_attempt`` the probe's number in the run). Like a
    pack call it starts only while the run is active.

    Returns:
        The new ``call_id``; ``None`` when the run is no longer active (do not call).

    Raises:
        OverBudget: the run's budget cannot hold the probe (nothing written).
    """
    async with conn.transaction():
        status, budget = await budget_for_share(conn, run_id)
        if status not in ACTIVE_STATUSES:
            return None
        reserved = await _reserve(conn, run_id, budget, worst_case_usd)
        # One probe at a time per run (the run's probe loop): max + 1 does not race.
        return await conn.fetchval(
            """insert into llm_calls (run_id, pack_path, pack_attempt, block_uids, model,
                   request, status, workflow_id, workflow_run_id, activity_id,
                   activity_attempt, purpose, provider, api, reserved_usd, endpoint_host)
               select $1, 'probe', coalesce(max(pack_attempt), 0) + 1, '{}', $2, $3,
                      'started', $4, $5, $6, $7, 'probe', $9, 'messages', $8, $10
               from llm_calls where run_id = $1 and pack_path = 'probe'
               returning call_id""",
            run_id,
            model,
            request,
            origin.workflow_id,
            origin.workflow_run_id,
            origin.activity_id,
            origin.activity_attempt,
            reserved,
            endpoint.provider if endpoint else "anthropic",
            endpoint.host if endpoint else None,
        )


async def mark_abandoned(
    conn: asyncpg.Connection, run_id: str, pack_path: str, pack_attempt: int
) -> None:
    """Mark a ``started`` row of this attempt ``abandoned``: its worker was lost mid-call."""
    await conn.execute(
        """update llm_calls set status = 'abandoned', finished_at = now(),
                  error_message = 'worker lost before the answer was recorded'
           where run_id = $1 and pack_path = $2 and pack_attempt = $3
             and status = 'started'""",
        run_id,
        pack_path,
        pack_attempt,
    )


async def record_answer(
    conn: asyncpg.Connection,
    call_id: int,
    message: dict[str, Any],
    request_id: str | None,
    usage: Usage,
    cost: float,
    latency_ms: int,
) -> Answer | None:
    """Record a received answer (before anyone parses it).

    Returns:
        The recorded answer; ``None`` when another worker already recorded an answer for
        this pack attempt: this one is then kept as ``failed`` (``duplicate_attempt``)
        and the caller should reuse the recorded one.
    """
    try:
        row = await conn.fetchrow(
            f"""update llm_calls set status = 'succeeded', response = $2, http_status = 200,
                       request_id = $3, stop_reason = $4, input_tokens = $5,
                       output_tokens = $6, cache_creation_input_tokens = $7,
                       cache_read_input_tokens = $8, cache_creation_1h_tokens = $9,
                       cost_usd = $10, latency_ms = $11, thinking_tokens = $12,
                       finished_at = now()
                where call_id = $1
                returning {_ANSWER_COLUMNS}""",
            call_id,
            message,
            request_id,
            message.get("stop_reason"),
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
            usage.cache_creation_1h_tokens,
            cost,
            latency_ms,
            usage.thinking_tokens,
        )
    except asyncpg.UniqueViolationError:
        await conn.execute(
            """update llm_calls set status = 'failed', response = $2,
                      error_type = 'duplicate_attempt', finished_at = now(),
                      error_message = 'answer discarded: this pack attempt was already '
                                      || 'answered by another worker'
               where call_id = $1""",
            call_id,
            message,
        )
        return None
    return Answer.from_row(row)


async def record_error(
    conn: asyncpg.Connection,
    call_id: int,
    status: int | None,
    error_type: str,
    message: str,
    request_id: str | None,
    latency_ms: int,
    error_code: str | None = None,
) -> None:
    """Record that a call failed (an error answer, or no answer at all), with the API's
    ``error.details.error_code`` when it sent one."""
    await conn.execute(
        """update llm_calls set status = 'failed', http_status = $2, error_type = $3,
                  error_message = $4, request_id = $5, latency_ms = $6, error_code = $7,
                  finished_at = now()
           where call_id = $1""",
        call_id,
        status,
        error_type,
        message[:4000],
        request_id,
        latency_ms,
        error_code,
    )


@dataclass(frozen=True)
class ToApply:
    """A recorded answer about to be applied; ``outcome`` is set once it was.

    ``block_aliases``: the short ids the call was sent with (alias -> block_uid), as
    recorded when it was opened; ``None`` when it named its blocks by block_uid.
    """

    block_uids: list[str]
    response: dict[str, Any]
    outcome: ApplyResultsOutput | None
    block_aliases: dict[str, str] | None = None


async def answer_to_apply(conn: asyncpg.Connection, run_id: str, call_id: int) -> ToApply:
    """The answer of ``call_id``, its row locked ``for update`` until the transaction ends.

    Raises:
        ValueError: no such call, or it has no response.
    """
    call = await conn.fetchrow(
        """select block_uids, block_aliases, response, stop_reason, apply_outcome, applied_at
           from llm_calls where call_id = $1 and run_id = $2 for update""",
        call_id,
        run_id,
    )
    if call is None or call["response"] is None:
        raise ValueError(f"ledger call {call_id} has no response to apply")
    outcome = (
        ApplyResultsOutput.model_validate(call["apply_outcome"])
        if call["applied_at"] is not None
        else None
    )
    return ToApply(list(call["block_uids"]), call["response"], outcome, call["block_aliases"])


async def save_apply_outcome(
    conn: asyncpg.Connection, call_id: int, outcome: ApplyResultsOutput
) -> None:
    """Record what applying the answer did (a repeat returns it unchanged)."""
    await conn.execute(
        "update llm_calls set apply_outcome = $2, applied_at = now() where call_id = $1",
        call_id,
        outcome.model_dump(mode="json"),
    )
