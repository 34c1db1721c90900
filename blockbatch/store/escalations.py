"""Escalations (``escalations``, migration 027): one row per block an escalation of a run took.

The life of a row (docs/ESCALATION.md), each move conditional on the status it leaves, so
a retried activity never moves a row twice::

    (planned)    -> planned       insert_plan: an answered block, with its first answer and
                                  its second pack
    (planned)    -> to_escalate   insert_plan: a block the first pass failed (or that was
                                  refused): no second pack, it goes up at once
    (planned)    -> kept          record_second, in the plan's transaction: the run's quality
                 or to_escalate   probe asked the block alone on the run's own model, and
                                  that answer is its second one (no second pack, no call)
    planned      -> kept          record_second: the two answers agree
    planned      -> to_escalate   record_second: they disagree, or no second answer
    to_escalate  -> escalated     record_escalation, in the transaction of
                                  ``overlays.escalate_answer`` (the overlay takes the answer;
                                  its call is the escalation's, or the quality probe's when
                                  the probe asked the block alone on the escalation model
                                  already: :func:`probe_answers`, no new call)
    to_escalate  -> skipped       record_escalation: the overlay no longer holds the first
                                  answer (a person reviewed it meanwhile): left as it is
    to_escalate  -> failed        record_escalation: the escalation call failed or its
                                  answer is unusable: the first answer stays

A run is escalated once (the primary key); while an escalation runs, the run is
``running`` again (:func:`reopen_for_escalation`) so its calls may open in the ledger, and
the escalation's last step closes it as a run ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from blockbatch.core.escalation import ProbedBlock, vs_probe
from blockbatch.core.escalation_types import (
    ESCALATION_FAILED,
    ESCALATION_PART,
    EscalationPhase,
    EscalationProgress,
    EscalationResult,
    EscalationVsProbe,
    PlanEscalationOutput,
)
from blockbatch.core.quality import QUALITY_PROBE
from blockbatch.core.run_types import ACTIVE_STATUSES
from blockbatch.core.schema import load_schema

#: Ledger purposes of an escalation's calls.
SECOND_PASS, ESCALATION = "second_pass", "escalation"


def second_path(second_pack: int) -> str:
    """The ledger pack path of a second-pass call."""
    return f"second-{second_pack}"


def escalation_path(block_index: int) -> str:
    """The ledger pack path of a block's escalation call."""
    return f"escalate-{block_index}"


@dataclass(frozen=True)
class FirstPassBlock:
    """A block of a finished run as the escalation plans it."""

    block_uid: str
    block_index: int
    est_tokens: int
    status: str
    reason_code: str | None
    #: The call that answered it (``None``: failed) and its answer.
    call_id: int | None
    answer: dict[str, Any] | None


async def existing_plan(conn: asyncpg.Connection, run_id: str) -> PlanEscalationOutput | None:
    """The run's escalation plan when it has one."""
    row = await conn.fetchrow(
        """select count(*) as blocks, coalesce(max(second_pack) + 1, 0) as packs,
                  count(*) filter (where second_pack is null and reason is not null) as up,
                  count(*) filter (where second_pack is null and second_call_id is not null)
                      as by_probe
           from escalations where run_id = $1""",
        run_id,
    )
    if not row["blocks"]:
        return None
    return PlanEscalationOutput(
        second_packs=row["packs"],
        blocks=row["blocks"],
        up_at_once=row["up"],
        by_probe=row["by_probe"],
    )


async def first_pass_blocks(conn: asyncpg.Connection, run_id: str) -> list[FirstPassBlock]:
    """The run's blocks an escalation takes, in block order: the model's own unreviewed
    answers (``ai_complete``, not edited, not reused from another run) and its failed
    blocks. Confirmed, rejected, edited, reused and cancelled blocks are left out."""
    rows = await conn.fetch(
        """select o.block_uid, o.block_index, b.est_tokens, o.status, o.reason_code,
                  o.call_id, o.staging
           from overlays o join blocks b using (block_uid)
           where o.run_id = $1
             and ((o.status = 'ai_complete' and o.model_answer is null
                   and o.reused_from_run_id is null and o.call_id is not null)
                  or o.status = 'failed')
           order by o.block_index""",
        run_id,
    )
    return [
        FirstPassBlock(
            r["block_uid"],
            r["block_index"],
            r["est_tokens"],
            r["status"],
            r["reason_code"],
            r["call_id"] if r["status"] == "ai_complete" else None,
            r["staging"] if r["status"] == "ai_complete" else None,
        )
        for r in rows
    ]


async def insert_plan(
    conn: asyncpg.Connection,
    run_id: str,
    model: str,
    blocks: Sequence[FirstPassBlock],
    second_pack: Sequence[int | None],
    reasons: Sequence[str | None],
    position: Sequence[int | None],
) -> None:
    """One row per block: ``planned`` in its second pack at ``position`` in the second
    order, or ``to_escalate`` with its reason (no second pack)."""
    await conn.execute(
        """insert into escalations (run_id, block_uid, block_index, model, second_pack,
               second_position, status, reason, first_call_id, first_answer)
           select $1, u, i, $2, p, q,
                  case when r is null then 'planned' else 'to_escalate' end, r, c, a
           from unnest($3::text[], $4::int[], $5::int[], $6::text[], $7::bigint[],
                       $8::jsonb[], $9::int[]) as t(u, i, p, r, c, a, q)
           on conflict do nothing""",
        run_id,
        model,
        [b.block_uid for b in blocks],
        [b.block_index for b in blocks],
        list(second_pack),
        list(reasons),
        [b.call_id for b in blocks],
        [b.answer for b in blocks],
        list(position),
    )


async def resumable(conn: asyncpg.Connection, run_id: str, model: str) -> bool:
    """Whether the run's escalation to ``model`` stopped with blocks left (cancelled, or
    failed for good) and may go on where it stopped."""
    left = await conn.fetchval(
        """select count(*) from escalations
           where run_id = $1 and model = $2 and status in ('planned', 'to_escalate')""",
        run_id,
        model,
    )
    return bool(left)


async def reopen_for_escalation(conn: asyncpg.Connection, run_id: str) -> None:
    """A finished run is ``running`` again while it is escalated: its calls open in the
    ledger only while it is active (``ledger.open_call``), and a retry waits."""
    await conn.execute(
        """update runs set status = 'running', error = null, finished_at = null,
                  cancel_requested_at = null
           where run_id = $1""",
        run_id,
    )


@dataclass(frozen=True)
class SecondBlock:
    """A block of a second pack, with what its request and the comparison need."""

    block_uid: str
    block_index: int
    block_type: str
    block_content: str
    est_tokens: int
    first_answer: dict[str, Any]


async def second_pack_blocks(
    conn: asyncpg.Connection, run_id: str, second_pack: int
) -> list[SecondBlock]:
    """The blocks of a second pack still waiting for their second answer, in the pack's
    order (the second packing's, kept by ``block_order``)."""
    rows = await conn.fetch(
        """select e.block_uid, e.block_index, b.block_type, b.block_content, b.est_tokens,
                  e.first_answer
           from escalations e join blocks b using (block_uid)
           where e.run_id = $1 and e.second_pack = $2 and e.status = 'planned'
           order by e.second_position""",
        run_id,
        second_pack,
    )
    return [
        SecondBlock(
            r["block_uid"],
            r["block_index"],
            r["block_type"],
            r["block_content"],
            r["est_tokens"],
            r["first_answer"],
        )
        for r in rows
    ]


#: A block's second answer as recorded: ``(call, answer, reason it goes up)`` (call or answer
#: ``None``: no usable answer came back; reason ``None``: it is kept).
Second = tuple[int | None, dict[str, Any] | None, str | None]


async def record_second(
    conn: asyncpg.Connection, run_id: str, seconds: Mapping[str, Second]
) -> int:
    """planned -> kept (no reason) or to_escalate, each block of ``seconds`` with its
    second answer and call: a second pack's, or the quality probe's alone on the run's own
    model (the plan's, :func:`probe_answers`); returns how many go up."""
    uids = list(seconds)
    rows = await conn.fetch(
        """update escalations e set second_call_id = t.c, second_answer = t.a, reason = t.r,
                  status = case when t.r is null then 'kept' else 'to_escalate' end,
                  updated_at = now()
           from unnest($2::text[], $3::bigint[], $4::jsonb[], $5::text[]) as t(u, c, a, r)
           where e.run_id = $1 and e.block_uid = t.u and e.status = 'planned'
           returning e.status""",
        run_id,
        uids,
        [seconds[u][0] for u in uids],
        [seconds[u][1] for u in uids],
        [seconds[u][2] for u in uids],
    )
    return sum(r["status"] == "to_escalate" for r in rows)


async def model_of(conn: asyncpg.Connection, run_id: str) -> str | None:
    """The model the run's escalation asks (``None``: never escalated)."""
    model: str | None = await conn.fetchval(
        "select model from escalations where run_id = $1 limit 1", run_id
    )
    return model


async def run_status_and_model(
    conn: asyncpg.Connection, run_id: str
) -> tuple[str, str | None] | None:
    """The run's status and its escalation's model (``None``: never escalated), read in
    one statement so that both come from one snapshot: planning an escalation reopens
    the run and writes its rows together, and two reads could straddle that commit (the
    run still finished, the rows already there: an escalation that runs taken for one
    that ended). ``None``: no such run."""
    row = await conn.fetchrow(
        """select r.status,
                  (select e.model from escalations e where e.run_id = r.run_id limit 1) as model
           from runs r where r.run_id = $1""",
        run_id,
    )
    return None if row is None else (row["status"], row["model"])


async def count_up(conn: asyncpg.Connection, run_id: str) -> int:
    """Blocks that go to the escalation model (once every second pack is done)."""
    return int(
        await conn.fetchval(
            "select count(*) from escalations where run_id = $1 and reason is not null", run_id
        )
    )


@dataclass(frozen=True)
class UpBlock:
    """A block to ask on the escalation model."""

    block_uid: str
    block_index: int
    block_type: str
    block_content: str
    est_tokens: int
    first_call_id: int | None


async def part_to_escalate(conn: asyncpg.Connection, run_id: str, part: int) -> list[UpBlock]:
    """Part ``part`` of the blocks that go up (:data:`ESCALATION_PART` of them in block
    order), those not yet asked: the parts are the same on every attempt, since a row
    with a reason keeps it."""
    rows = await conn.fetch(
        """select * from (
               select e.block_uid, e.block_index, b.block_type, b.block_content, b.est_tokens,
                      e.first_call_id, e.status
               from escalations e join blocks b using (block_uid)
               where e.run_id = $1 and e.reason is not null
               order by e.block_index offset $2 limit $3) p
           where p.status = 'to_escalate'""",
        run_id,
        part * ESCALATION_PART,
        ESCALATION_PART,
    )
    return [
        UpBlock(
            r["block_uid"],
            r["block_index"],
            r["block_type"],
            r["block_content"],
            r["est_tokens"],
            r["first_call_id"],
        )
        for r in rows
    ]


@dataclass(frozen=True)
class ProbeAnswer:
    """A block's answer alone from the run's quality probe, on the escalation model."""

    call_id: int
    pack_path: str
    answer: dict[str, Any]
    #: Its grounded quotes (a schema asking for evidence), as the probe kept them.
    evidence: dict[str, Any] | None


async def probe_answers(
    conn: asyncpg.Connection, run_id: str, uids: Sequence[str], model: str
) -> dict[str, ProbeAnswer]:
    """The blocks of ``uids`` the run's quality probe compared with an answer alone on
    ``model`` (its ledger call on that model, answered). An escalation to ``model`` takes
    that answer instead of paying for the same question again; with ``model`` the run's
    own, the escalation's plan takes it as the block's second answer (:func:`record_second`)."""
    rows = await conn.fetch(
        """select q.block_uid, q.llm_call_id, c.pack_path, q.single, q.evidence
           from quality_samples q join llm_calls c on c.call_id = q.llm_call_id
           where q.run_id = $1 and q.block_uid = any($2::text[]) and q.status = 'compared'
             and q.single is not null and c.run_id = q.run_id and c.model = $3
             and c.status = 'succeeded'""",
        run_id,
        list(uids),
        model,
    )
    return {
        r["block_uid"]: ProbeAnswer(r["llm_call_id"], r["pack_path"], r["single"], r["evidence"])
        for r in rows
    }


async def record_escalation(
    conn: asyncpg.Connection,
    run_id: str,
    block_uid: str,
    *,
    status: str,
    call_id: int | None,
    answer: dict[str, Any] | None,
    error: str | None = None,
) -> None:
    """to_escalate -> escalated, skipped or failed."""
    await conn.execute(
        """update escalations set status = $3, escalation_call_id = $4,
                  escalation_answer = $5, error = $6, updated_at = now()
           where run_id = $1 and block_uid = $2 and status = 'to_escalate'""",
        run_id,
        block_uid,
        status,
        call_id,
        answer,
        error,
    )


async def result(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> EscalationResult | None:
    """What the run's escalation did, from its rows and the ledger by purpose; ``None``:
    the run was never escalated."""
    rows = await conn.fetch(
        """select model, status, reason, count(*) as n from escalations where run_id = $1
           group by 1, 2, 3""",
        run_id,
    )
    if not rows:
        return None
    out = EscalationResult(model=rows[0]["model"])
    for r in rows:
        n, status = r["n"], r["status"]
        out.blocks += n
        if r["reason"] is not None:
            out.escalated_by_reason[r["reason"]] = out.escalated_by_reason.get(r["reason"], 0) + n
        out.left += n if status in ("planned", "to_escalate") else 0
        out.kept += n if status == "kept" else 0
        out.escalated += n if status == "escalated" else 0
        out.escalation_failed += n if status == "failed" else 0
        out.skipped += n if status == "skipped" else 0
    if out.left:
        run = await conn.fetchrow("select status, error from runs where run_id = $1", run_id)
        if run["status"] in (*ACTIVE_STATUSES, "cancelling"):
            out.status = "running"
        elif (run["error"] or "").startswith(ESCALATION_FAILED):
            out.status = "failed"
        else:
            out.status = "cancelled"
    counts = await conn.fetchrow(
        """select count(*) filter (where second_pack is not null and status <> 'planned')
                      as compared,
                  count(*) filter (where second_pack is null and second_call_id is not null)
                      as with_probe,
                  count(*) filter (where status = 'escalated' and exists (
                      select 1 from llm_calls c where c.call_id = e.escalation_call_id
                        and c.purpose = $2)) as reused
           from escalations e where run_id = $1""",
        run_id,
        QUALITY_PROBE,
    )
    out.compared, out.reused_from_probe = int(counts["compared"]), int(counts["reused"])
    out.compared_with_probe = int(counts["with_probe"])
    out.escalated_by_reason = dict(sorted(out.escalated_by_reason.items(), key=lambda kv: -kv[1]))
    spent = await conn.fetch(
        """select purpose, count(*) filter (where status <> 'started') as calls,
                  coalesce(sum(cost_usd), 0)::float8 as cost
           from llm_calls where run_id = $1 and purpose = any($2::text[]) group by 1""",
        run_id,
        [SECOND_PASS, ESCALATION],
    )
    for s in spent:
        if s["purpose"] == SECOND_PASS:
            out.second_pass_calls, out.second_pass_cost_usd = s["calls"], s["cost"]
        else:
            out.escalation_calls, out.escalation_cost_usd = s["calls"], s["cost"]
    out.vs_probe = await _vs_probe(conn, run_id)
    return out


async def _vs_probe(
    conn: asyncpg.Connection | asyncpg.Pool, run_id: str
) -> EscalationVsProbe | None:
    """The run's answers now against the probe's answers alone, on its compared samples
    (``core.escalation.vs_probe``; ``None``: no sample compared)."""
    run = await conn.fetchrow(
        """select s.definition, s.name, r.settings->>'model' as model,
                  coalesce(r.settings->'quality'->>'probe_model', r.settings->>'model')
                      as probe_model
           from runs r join schemas s using (schema_id) where r.run_id = $1""",
        run_id,
    )
    rows = await conn.fetch(
        """select q.single, q.agrees,
                  case when o.status in ('ai_complete', 'confirmed', 'rejected')
                       then coalesce(o.model_answer, o.staging) end as answer
           from quality_samples q
           join overlays o on o.run_id = q.run_id and o.block_uid = q.block_uid
           where q.run_id = $1 and q.status = 'compared' and q.single is not null""",
        run_id,
    )
    if run is None or not rows:
        return None
    return vs_probe(
        load_schema(dict(run["definition"]), name=run["name"]),
        [ProbedBlock(r["single"], bool(r["agrees"]), r["answer"]) for r in rows],
        probe_model=run["probe_model"],
        run_model=run["probe_model"] == run["model"],
    )


@dataclass(frozen=True)
class EscalationRow:
    """One block's escalation as the review grid shows it."""

    status: str
    reason: str | None
    model: str
    first_answer: dict[str, Any] | None
    second_answer: dict[str, Any] | None
    escalation_answer: dict[str, Any] | None


async def rows_of(
    conn: asyncpg.Connection | asyncpg.Pool, run_id: str, uids: Sequence[str]
) -> dict[str, EscalationRow]:
    """The escalation rows of ``uids`` (blocks the run's escalation took)."""
    rows = await conn.fetch(
        """select block_uid, status, reason, model, first_answer, second_answer,
                  escalation_answer
           from escalations where run_id = $1 and block_uid = any($2::text[])""",
        run_id,
        list(uids),
    )
    return {
        r["block_uid"]: EscalationRow(
            r["status"],
            r["reason"],
            r["model"],
            r["first_answer"],
            r["second_answer"],
            r["escalation_answer"],
        )
        for r in rows
    }


async def share_sent_up(
    conn: asyncpg.Connection | asyncpg.Pool, schema_id: str, model: str, to: str
) -> tuple[float, int] | None:
    """``(share of blocks sent up, runs)`` over the finished escalations to ``to`` of runs
    of ``schema_id`` on ``model`` (``None``: none yet)."""
    row = await conn.fetchrow(
        """select count(*) filter (where e.reason is not null) as up, count(*) as taken,
                  count(distinct e.run_id) as runs
           from escalations e join runs r using (run_id)
           where r.schema_id = $1 and r.model = $2 and e.model = $3
             and e.status <> 'planned'""",
        schema_id,
        model,
        to,
    )
    if row is None or not row["taken"]:
        return None
    return int(row["up"]) / int(row["taken"]), int(row["runs"])


def phase_of(
    counts: EscalationResult | None, run_status: str | None, packs_waiting: int
) -> EscalationPhase:
    """Where an escalation is, from its counts, its run's status and the second packs with
    a block still waiting for its second answer (``counts`` ``None``: not planned yet)."""
    if counts is None:
        return "planning"
    if run_status == "cancelling":
        return "cancelling"
    if run_status not in ACTIVE_STATUSES:
        if not counts.left:
            return "done"
        return "failed" if counts.status == "failed" else "cancelled"
    if packs_waiting:
        return "second pass"
    return "escalating" if counts.left else "finishing"


async def progress(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> EscalationProgress:
    """The run's escalation as it goes: :func:`result` so far, its second packs and its
    phase (``planning`` while it has no row: the caller knows whether one was started)."""
    counts = await result(conn, run_id)
    packs = await conn.fetchrow(
        """select count(*) as blocks, count(distinct second_pack) as total,
                  count(distinct second_pack) filter (where status = 'planned') as waiting
           from escalations where run_id = $1 and second_pack is not null""",
        run_id,
    )
    run_status = await conn.fetchval("select status from runs where run_id = $1", run_id)
    return EscalationProgress(
        run_id=run_id,
        phase=phase_of(counts, run_status, packs["waiting"]),
        second_packs=packs["total"],
        second_packs_done=packs["total"] - packs["waiting"],
        second_blocks=packs["blocks"],
        escalation=counts,
    )
