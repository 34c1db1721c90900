"""The quality probe's samples (``quality_samples``): which blocks a run also asks alone, and
what their packed and single answers said.

A row is written ``planned`` with the run's plan (:func:`plan_sample`), then ``compared``
once its single answer is in (:func:`record_compared`), ``failed`` when the probe call or its
answer failed, or ``skipped`` when the run stopped or its budget could not hold the probe.
The packed answer is never touched here: it stays the overlay. Reads for the run's summary
(:func:`samples`, :func:`probe_cost`), the pack's running tally (:func:`pack_tally`) and
review (:func:`disagreeing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from blockbatch.core.agreement import (
    AgreementSummary,
    FieldCount,
    SampleCount,
    summarize_counts,
)
from blockbatch.core.evidence import GroundingCount
from blockbatch.core.quality import QUALITY_PROBE, ProbePlan, grounding_result, quality_result
from blockbatch.core.quality_types import GroundingResult, QualityResult
from blockbatch.core.views import Disagreement
from blockbatch.store.replans import changes, gate_size


async def plan_sample(conn: asyncpg.Connection, run_id: str, uids: Sequence[str]) -> int:
    """Write the run's sample (``planned``), in the planning transaction; a repeat adds
    nothing. Returns how many rows are new."""
    if not uids:
        return 0
    rows = await conn.fetch(
        """insert into quality_samples (run_id, block_uid)
           select $1, u from unnest($2::text[]) as t(u)
           on conflict do nothing returning 1""",
        run_id,
        list(uids),
    )
    return len(rows)


async def save_plan(conn: asyncpg.Connection, run_id: str, plan: ProbePlan) -> None:
    """How the run's sample was sized (core.quality.probe_plan), in the planning
    transaction; once."""
    await conn.execute(
        """insert into quality_plans (run_id, wanted, planned, max_share, est_probe_usd,
                                      est_run_usd)
           values ($1, $2, $3, $4, $5, $6) on conflict (run_id) do nothing""",
        run_id,
        plan.wanted,
        plan.planned,
        plan.max_share,
        plan.est_probe_usd,
        plan.est_run_usd,
    )


async def sample_plan(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> ProbePlan | None:
    """How the run's sample was sized (``None``: not recorded)."""
    row = await conn.fetchrow(
        """select p.wanted, p.planned, p.max_share, p.est_probe_usd, p.est_run_usd,
                  (select coalesce(sum(k.blocks), 0) from run_packs k
                   where k.run_id = p.run_id) as blocks
           from quality_plans p where p.run_id = $1""",
        run_id,
    )
    if row is None:
        return None
    return ProbePlan(
        row["wanted"],
        row["planned"],
        row["max_share"],
        row["est_probe_usd"],
        row["est_run_usd"],
        int(row["blocks"]),
    )


async def answered_uids(conn: asyncpg.Connection, run_id: str, pack_index: int) -> list[str]:
    """The blocks a pack answered itself in a call of two or more (not reused, not failed,
    not answered alone after halving), in block order."""
    rows = await conn.fetch(
        """select o.block_uid from overlays o join llm_calls c on c.call_id = o.call_id
           where o.run_id = $1 and o.pack_index = $2 and o.reused_from_run_id is null
             and o.status in ('ai_complete', 'confirmed', 'rejected')
             and cardinality(c.block_uids) >= 2
             -- a block the gate re-asked, compared in its earlier pack: not again
             and not exists (select 1 from quality_samples q
                             where q.run_id = o.run_id and q.block_uid = o.block_uid
                               and q.pack_index is not null and q.pack_index <> $2
                               and q.status <> 'planned')
           order by o.block_index""",
        run_id,
        pack_index,
    )
    return [r["block_uid"] for r in rows]


@dataclass(frozen=True)
class ProbeBlock:
    """A sampled block of a pack, answered in that pack and ready to be asked alone."""

    block_uid: str
    block_index: int
    block_type: str
    block_content: str
    est_tokens: int
    #: The model's packed answer (before any person's edit).
    packed: dict[str, Any]
    #: Blocks in the call that answered it, and its position there (1 for the first).
    pack_size: int
    position: int
    #: The pack that answered it.
    pack_index: int | None = None


async def to_probe(conn: asyncpg.Connection, run_id: str, pack_index: int) -> list[ProbeBlock]:
    """The sampled blocks of a pack still to compare, whose pack answered them: not reused
    from an earlier run, not failed (those are never compared)."""
    rows = await conn.fetch(
        """select q.block_uid, o.block_index, b.block_type, b.block_content, b.est_tokens,
                  coalesce(o.model_answer, o.staging) as packed,
                  cardinality(c.block_uids) as pack_size,
                  array_position(c.block_uids, q.block_uid) as position
           from quality_samples q
           join overlays o on o.run_id = q.run_id and o.block_uid = q.block_uid
           join blocks b on b.block_uid = q.block_uid
           join llm_calls c on c.call_id = o.call_id
           where q.run_id = $1 and q.status = 'planned' and o.pack_index = $2
             and o.status in ('ai_complete', 'confirmed', 'rejected')
             and o.reused_from_run_id is null
           order by o.block_index""",
        run_id,
        pack_index,
    )
    return [
        ProbeBlock(
            r["block_uid"],
            r["block_index"],
            r["block_type"],
            r["block_content"],
            r["est_tokens"],
            r["packed"],
            r["pack_size"],
            r["position"] or 1,
            pack_index,
        )
        for r in rows
    ]


async def record_compared(
    conn: asyncpg.Connection,
    run_id: str,
    block: ProbeBlock,
    *,
    single: dict[str, Any],
    fields: list[dict[str, Any]],
    agrees: bool,
    call_id: int,
    evidence: dict[str, Any] | None = None,
) -> None:
    """A sample's single answer and how it compares with the packed one (once), with the
    single answer's grounded quotes when the schema asks for evidence."""
    await conn.execute(
        """update quality_samples set status = 'compared', pack_size = $3, position = $4,
                  packed = $5, single = $6, fields = $7, agrees = $8, llm_call_id = $9,
                  error = null, compared_at = now(), pack_index = $10, evidence = $11
           where run_id = $1 and block_uid = $2 and status = 'planned'""",
        run_id,
        block.block_uid,
        block.pack_size,
        block.position,
        block.packed,
        single,
        fields,
        agrees,
        call_id,
        block.pack_index,
        evidence,
    )


async def record_not_compared(
    conn: asyncpg.Connection,
    run_id: str,
    block: ProbeBlock,
    *,
    status: str,
    error: str,
    call_id: int | None = None,
) -> None:
    """A sample that could not be compared: ``failed`` (its call or answer failed) or
    ``skipped`` (the run stopped, or its budget could not hold the call)."""
    await conn.execute(
        """update quality_samples set status = $3, pack_size = $4, position = $5,
                  packed = $6, error = $7, llm_call_id = $8, compared_at = now(),
                  pack_index = $9
           where run_id = $1 and block_uid = $2 and status = 'planned'""",
        run_id,
        block.block_uid,
        status,
        block.pack_size,
        block.position,
        block.packed,
        error[:2000],
        call_id,
        block.pack_index,
    )


async def pack_tally(
    conn: asyncpg.Connection, run_id: str, pack_index: int
) -> tuple[int, int, int]:
    """``(compared, agreeing, failed)`` over the samples of one pack (the gate counts the
    first two): those that compared its answers (a block the gate re-asked into it keeps
    its earlier pack's comparison there)."""
    # Two indexed reads of the pack's rows only (migration 033), never the run's samples:
    # those recorded in this pack, and the pack's own blocks' samples not yet recorded.
    row = await conn.fetchrow(
        """select count(*) filter (where s.status = 'compared') as n,
                  count(*) filter (where s.status = 'compared' and s.agrees) as agreeing,
                  count(*) filter (where s.status = 'failed') as failed
           from (select q.status, q.agrees from quality_samples q
                 where q.run_id = $1 and q.pack_index = $2
                   and exists (select 1 from overlays o
                               where o.run_id = q.run_id and o.block_uid = q.block_uid)
                 union all
                 select q.status, q.agrees from overlays o
                 join quality_samples q on q.run_id = o.run_id and q.block_uid = o.block_uid
                 where o.run_id = $1 and o.pack_index = $2 and q.pack_index is null) s""",
        run_id,
        pack_index,
    )
    return int(row["n"]), int(row["agreeing"]), int(row["failed"])


async def agreement(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> AgreementSummary:
    """The run's compared samples summarized (:func:`summarize_counts`), counted in Postgres:
    grouped by pack size, position and verdict, and their fields by name and verdict, so a
    run with tens of thousands of samples sends a few rows, not every sample (issue 39).
    Fields come in the order they first appear in a sample's verdicts (the schema's)."""
    blocks = await conn.fetch(
        """select pack_size, position, agrees, count(*) as n from quality_samples
           where run_id = $1 and status = 'compared'
           group by 1, 2, 3 order by 1, 2, 3""",
        run_id,
    )
    fields = await conn.fetch(
        """select f.v->>'field' as field, (f.v->>'agree')::boolean as agree, count(*) as n
           from quality_samples q
           cross join lateral jsonb_array_elements(q.fields) with ordinality f(v, i)
           where q.run_id = $1 and q.status = 'compared'
           group by 1, 2 order by min(f.i), 1, 2""",
        run_id,
    )
    return summarize_counts(
        [SampleCount(r["pack_size"], r["position"], r["agrees"], r["n"]) for r in blocks],
        [FieldCount(r["field"], r["agree"], r["n"]) for r in fields],
    )


@dataclass(frozen=True)
class ProbeCost:
    """The run's probe calls as the ledger has them, and the whole run's cost."""

    calls: int
    cost_usd: float
    run_cost_usd: float
    #: Samples whose probe failed (call or answer), and those planned in all.
    failed: int
    planned: int


async def probe_cost(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> ProbeCost:
    row = await conn.fetchrow(
        """select count(*) filter (where purpose = $2 and status <> 'started') as calls,
                  coalesce(sum(cost_usd) filter (where purpose = $2), 0)::float8 as cost,
                  coalesce(sum(cost_usd), 0)::float8 as run_cost,
                  (select count(*) from quality_samples
                   where run_id = $1 and status = 'failed') as failed,
                  (select count(*) from quality_samples where run_id = $1) as planned
           from llm_calls where run_id = $1""",
        run_id,
        QUALITY_PROBE,
    )
    return ProbeCost(
        int(row["calls"]),
        float(row["cost"]),
        float(row["run_cost"]),
        int(row["failed"]),
        int(row["planned"]),
    )


async def disagreeing(
    conn: asyncpg.Connection | asyncpg.Pool, run_id: str, *, limit: int = 50, offset: int = 0
) -> tuple[int, list[Disagreement]]:
    """``(total, page)`` of the run's disagreeing blocks, in block order."""
    total = await conn.fetchval(
        "select count(*) from quality_samples where run_id = $1 and agrees = false", run_id
    )
    rows = await conn.fetch(
        """select q.block_uid, b.block_index, b.block_type, b.block_content, q.pack_size,
                  q.position, q.packed, q.single, q.fields
           from quality_samples q join blocks b using (block_uid)
           where q.run_id = $1 and q.agrees = false
           order by b.block_index limit $2 offset $3""",
        run_id,
        limit,
        offset,
    )
    return int(total), [
        Disagreement(
            r["block_uid"],
            r["block_index"],
            r["block_type"],
            r["block_content"],
            r["pack_size"],
            r["position"],
            r["packed"],
            r["single"],
            list(r["fields"]),
        )
        for r in rows
    ]


async def disagreeing_uids(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> list[str]:
    """The block_uids of the run's disagreeing blocks (the review app's filter)."""
    rows = await conn.fetch(
        "select block_uid from quality_samples where run_id = $1 and agrees = false", run_id
    )
    return [r["block_uid"] for r in rows]


async def largest_pack(conn: asyncpg.Connection, run_id: str, first_pack: int) -> int:
    """The most pending blocks in one of the run's packs from ``first_pack`` on (0: none)."""
    return int(
        await conn.fetchval(
            """select coalesce(max(n), 0) from (
               select count(*) as n from overlays
               where run_id = $1 and pack_index >= $2 and status = 'pending'
               group by pack_index) p""",
            run_id,
            first_pack,
        )
    )


async def planned_pack_size(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> int:
    """The most blocks any of the run's packs was planned with (reused blocks aside)."""
    return int(
        await conn.fetchval(
            "select coalesce(max(blocks), 0) from run_packs where run_id = $1",
            run_id,
        )
    )


async def result(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> QualityResult | None:
    """What the run's quality probe found (``None``: it sampled nothing): agreement overall,
    per field, pack size and position, the probe's cost, the pack size the run settled on
    and what the quality gate did."""
    cost = await probe_cost(conn, run_id)
    plan = await sample_plan(conn, run_id)
    found = await grounding(conn, run_id)
    # A sample its cost cap left empty is said too (the summary says why nothing was probed).
    probed = bool(cost.planned or cost.calls or (plan is not None and plan.capped))
    if not probed and found is None:
        return None
    summary = await agreement(conn, run_id)
    gate = await changes(conn, run_id, kind="quality_gate")
    settings = await conn.fetchrow(
        """select (settings->'quality'->>'min_agreement')::float8 as target,
                  settings->'quality'->>'probe_model' as probe_model
           from runs where run_id = $1""",
        run_id,
    )
    target = settings["target"] if settings is not None else None
    size = await gate_size(conn, run_id) if gate else await planned_pack_size(conn, run_id)
    return quality_result(
        summary,
        failed=cost.failed,
        probe_calls=cost.calls,
        probe_cost_usd=cost.cost_usd,
        run_cost_usd=cost.run_cost_usd,
        pack_size=size or None,
        min_agreement=target,
        gate=[c.text() for c in gate],
        plan=plan,
        reasked=sum(c.reasked for c in gate),
        probe_model=settings["probe_model"] if settings is not None else None,
        grounding=found,
        probed=probed,
    )


async def grounding(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> GroundingResult | None:
    """How the run's answered values were grounded (``overlays.evidence``, migration 025),
    per field and overall (``None``: no overlay of the run has evidence)."""
    rows = await conn.fetch(
        """select e.key as field, e.value->>'match' as match, count(*) as n
           from overlays o cross join lateral jsonb_each(o.evidence) e
           where o.run_id = $1 and o.evidence is not null
             and o.status in ('ai_complete', 'confirmed', 'rejected')
           group by 1, 2""",
        run_id,
    )
    if not rows:
        return None
    by_field: dict[str, GroundingCount] = {}
    for r in rows:
        count = by_field.setdefault(r["field"], GroundingCount())
        if r["match"] in ("exact", "normalised", "missing"):
            count.values += int(r["n"])
            setattr(count, r["match"], getattr(count, r["match"]) + int(r["n"]))
    blocks = await conn.fetchval(
        """select count(*) from overlays where run_id = $1 and reason_code = 'ungrounded'
             and status in ('ai_complete', 'confirmed', 'rejected')""",
        run_id,
    )
    # The probe's blocks: their packed answer's grounding beside their answer alone's.
    pairs = await conn.fetch(
        """select o.evidence as packed, q.evidence as alone from quality_samples q
           join overlays o on o.run_id = q.run_id and o.block_uid = q.block_uid
           where q.run_id = $1 and q.status = 'compared' and q.evidence is not null
             and o.evidence is not null""",
        run_id,
    )
    packed, alone = GroundingCount(), GroundingCount()
    for pair in pairs:
        packed.add(pair["packed"])
        alone.add(pair["alone"])
    return grounding_result(by_field, int(blocks), sampled=(packed, alone) if pairs else None)


async def prefix_cache_seen(
    conn: asyncpg.Connection | asyncpg.Pool, prefix_sha256: str, model: str
) -> bool | None:
    """What the API did with this prompt prefix on ``model`` before (the minimum is the
    model's): ``True`` when an answered call of it read or wrote the cache, ``False`` when
    calls of it answered with neither (below the minimum: the API skips caching silently),
    ``None`` before any such call."""
    row = await conn.fetchrow(
        """select exists(select 1 from llm_calls where prefix_sha256 = $1 and model = $2
                         and status = 'succeeded'
                         and cache_creation_input_tokens + cache_read_input_tokens > 0)
                      as cached,
                  exists(select 1 from llm_calls where prefix_sha256 = $1 and model = $2
                         and status = 'succeeded') as answered""",
        prefix_sha256,
        model,
    )
    if row["cached"]:
        return True
    return False if row["answered"] else None
