"""Packs that learn: what a run's answers wrote, and re-planning the packs not started yet.

Tables: plan_changes (one row per re-plan), overlays (``pack_index`` of pending blocks),
llm_calls (output tokens of answered pack calls), blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from blockbatch.core.planning import OutputRatios, replan_text
from blockbatch.core.quality import gate_text
from blockbatch.core.run_types import GateReading

#: Samples are the blocks of a run's latest answered pack calls, at most this many calls.
_SAMPLE_CALLS = 200
#: Prior ratios come from the latest answered pack calls of earlier runs, at most this many.
_PRIOR_CALLS = 100


@dataclass(frozen=True)
class AnsweredBlock:
    """A block a run's pack call answered: its type and size, and the answer it got."""

    block_type: str
    est_tokens: int
    answer: Any


@dataclass(frozen=True)
class Answers:
    """The blocks of a run's latest answered pack calls, and what those calls wrote."""

    blocks: list[AnsweredBlock]
    calls: int
    output_tokens: int


async def answers(conn: asyncpg.Connection, run_id: str) -> Answers:
    """The answered blocks of the run's latest pack calls answered in full (a truncated
    answer says only "more"), with those calls' output tokens less their thinking (the
    answers' share: thinking is learned per call, ``ledger.observed_output``)."""
    rows = await conn.fetch(
        """with calls as (
               select call_id, output_tokens - thinking_tokens as output_tokens
               from llm_calls
               where run_id = $1 and purpose = 'pack' and status = 'succeeded'
                 and stop_reason is distinct from 'max_tokens'
               order by call_id desc limit $2)
           select b.block_type, b.est_tokens, o.staging, c.call_id, c.output_tokens
           from calls c
           join overlays o on o.run_id = $1 and o.call_id = c.call_id
                          and o.status in ('ai_complete', 'confirmed', 'rejected')
           join blocks b on b.block_uid = o.block_uid""",
        run_id,
        _SAMPLE_CALLS,
    )
    outputs = {r["call_id"]: r["output_tokens"] or 0 for r in rows}
    return Answers(
        blocks=[AnsweredBlock(r["block_type"], r["est_tokens"], r["staging"]) for r in rows],
        calls=len(outputs),
        output_tokens=sum(outputs.values()),
    )


@dataclass(frozen=True)
class SchemaOutput:
    """What the latest answered pack calls of a schema's runs on a model wrote, against the
    planner's estimate of the answers' shape (``est_output_tokens``)."""

    runs: int
    calls: int
    blocks: int
    estimated: int
    #: Answer tokens written (thinking left out).
    written: int
    #: Thinking tokens per call of those calls made at ``effort`` (``None``: none thought).
    thinking_per_call: float | None = None

    @property
    def ratio(self) -> float:
        return self.written / self.estimated


async def schema_output(
    conn: asyncpg.Connection,
    schema_id: str,
    model: str,
    *,
    except_run: str | None = None,
    effort: str | None = None,
) -> SchemaOutput | None:
    """What runs of this schema (by content: its id is its content hash) on this model
    wrote, over their latest :data:`_PRIOR_CALLS` pack calls answered in full (a truncated
    answer says only "more"); ``None`` when there are none. Plans (``prior_output``) and
    quotes (``blockbatch.store.quotes``) read the same calls. Their thinking per call counts only the
    runs at ``effort`` (the run option; ``None``: none set), which governs how much a
    call thinks."""
    row = await conn.fetchrow(
        """with latest as (
               select c.run_id, c.output_tokens - c.thinking_tokens as output_tokens,
                      c.est_output_tokens, c.thinking_tokens,
                      e.settings->>'effort' is not distinct from $5 as same_effort,
                      cardinality(c.block_uids) as blocks
               from runs e join llm_calls c on c.run_id = e.run_id
               where e.schema_id = $1 and e.model = $2 and e.run_id is distinct from $3
                 and c.purpose = 'pack' and c.status = 'succeeded'
                 and c.est_output_tokens > 0 and c.stop_reason is distinct from 'max_tokens'
               order by c.call_id desc limit $4)
           select count(distinct run_id) as runs, count(*) as calls, sum(blocks) as blocks,
                  sum(est_output_tokens) as estimated, sum(output_tokens) as written,
                  count(*) filter (where same_effort) as effort_calls,
                  sum(thinking_tokens) filter (where same_effort) as thinking
           from latest""",
        schema_id,
        model,
        except_run,
        _PRIOR_CALLS,
        effort,
    )
    if row is None or not row["calls"] or not row["estimated"]:
        return None
    thinking = int(row["thinking"] or 0)
    return SchemaOutput(
        runs=int(row["runs"]),
        calls=int(row["calls"]),
        blocks=int(row["blocks"]),
        estimated=int(row["estimated"]),
        written=int(row["written"]),
        thinking_per_call=(thinking / int(row["effort_calls"]) if thinking else None),
    )


async def prior_output(conn: asyncpg.Connection, run_id: str) -> SchemaOutput | None:
    """What earlier runs of this run's schema on its model wrote (:func:`schema_output`)."""
    run = await conn.fetchrow("select schema_id, model from runs where run_id = $1", run_id)
    if run is None:
        return None
    return await schema_output(conn, run["schema_id"], run["model"], except_run=run_id)


@dataclass(frozen=True)
class UnstartedBlock:
    block_uid: str
    block_type: str
    est_tokens: int
    block_index: int = 0


async def unstarted_blocks(
    conn: asyncpg.Connection, run_id: str, first_pack: int
) -> list[UnstartedBlock]:
    """The run's pending blocks in packs from ``first_pack`` on (none of them started), in
    block order."""
    rows = await conn.fetch(
        """select o.block_uid, b.block_type, b.est_tokens, o.block_index
           from overlays o join blocks b using (block_uid)
           where o.run_id = $1 and o.pack_index >= $2 and o.status = 'pending'
           order by o.block_index""",
        run_id,
        first_pack,
    )
    return [
        UnstartedBlock(r["block_uid"], r["block_type"], r["est_tokens"], r["block_index"])
        for r in rows
    ]


@dataclass(frozen=True)
class AnsweredLarger:
    """A block a run's earlier pack answered in a call of more blocks than the gate's new
    size, its model answer unreviewed: the gate re-asks it."""

    block_uid: str
    block_index: int
    block_type: str
    est_tokens: int
    call_size: int


async def answered_in_larger_packs(
    conn: asyncpg.Connection, run_id: str, first_pack: int, size: int
) -> list[AnsweredLarger]:
    """The run's blocks answered by its packs before ``first_pack`` in calls of more than
    ``size`` blocks whose answers only the model wrote (``ai_complete``, not edited: no
    ``model_answer``; not reused), in block order."""
    rows = await conn.fetch(
        """select o.block_uid, o.block_index, b.block_type, b.est_tokens,
                  cardinality(c.block_uids) as call_size
           from overlays o join blocks b using (block_uid)
           join llm_calls c on c.call_id = o.call_id
           where o.run_id = $1 and o.pack_index < $2 and o.status = 'ai_complete'
             and o.model_answer is null and o.reused_from_run_id is null
             and c.purpose = 'pack' and cardinality(c.block_uids) > $3
           order by o.block_index""",
        run_id,
        first_pack,
        size,
    )
    return [
        AnsweredLarger(
            r["block_uid"], r["block_index"], r["block_type"], r["est_tokens"], r["call_size"]
        )
        for r in rows
    ]


@dataclass(frozen=True)
class PlanChange:
    """One re-plan of a run's unstarted packs: from what the answers wrote (``learned``,
    with the ``ratios`` it used), or by the quality gate (``quality_gate``: the
    ``pack_size`` it set, the size before in ``ratios["was"]``, and what it saw; the
    blocks it re-asked in ``ratios["reasked"]``, the sizes of the calls that had answered
    them in ``ratios["reasked_sizes"]``, smallest and largest)."""

    first_pack: int
    packs_before: int
    packs_after: int
    ratios: dict[str, Any]
    kind: str = "learned"
    pack_size: int | None = None
    gate: dict[str, Any] | None = None

    @property
    def reasked(self) -> int:
        """Blocks the quality gate re-asked with this re-plan (``ratios["reasked"]``)."""
        return int(self.ratios.get("reasked", 0)) if self.kind == "quality_gate" else 0

    def text(self) -> str:
        """What changed, as the summary and the Temporal UI say it."""
        if self.kind == "quality_gate":
            assert self.gate is not None and self.pack_size is not None
            sizes = self.ratios.get("reasked_sizes")
            return gate_text(
                GateReading.model_validate(self.gate),
                self.first_pack,
                self.packs_after,
                self.pack_size,
                int(self.ratios["was"]),
                self.reasked,
                tuple(sizes) if sizes else None,
            )
        return replan_text(
            self.first_pack, self.packs_before, self.packs_after, OutputRatios(**self.ratios)
        )


async def recorded_change(
    conn: asyncpg.Connection, run_id: str, first_pack: int, kind: str = "learned"
) -> PlanChange | None:
    """The re-plan of ``kind`` already made from ``first_pack`` (an activity retried after
    it)."""
    row = await conn.fetchrow(
        f"""select {_CHANGE_COLUMNS} from plan_changes
            where run_id = $1 and first_pack = $2 and kind = $3""",
        run_id,
        first_pack,
        kind,
    )
    return _change(row) if row is not None else None


async def gate_size(conn: asyncpg.Connection, run_id: str) -> int | None:
    """The pack size the quality gate set last (``None``: it never did): later re-plans
    stay within it."""
    return await conn.fetchval(
        """select pack_size from plan_changes where run_id = $1 and kind = 'quality_gate'
           order by first_pack desc limit 1""",
        run_id,
    )


#: Packs moved per statement (about 5,000 blocks, 2 s). A million-block run's first re-plan moves every block it has
#: not started; in one statement that overran the pool's 60 s command timeout on a loaded
#: machine, and the retried activity overran it again (bench/scale.py, issue 39).
REPACK_PACKS_PER_STATEMENT = 200


def pack_ranges(indexes: Sequence[int], packs: Sequence[int]) -> list[tuple[int, int, int]] | None:
    """``(pack, first block_index, last block_index)`` of each pack, when the blocks (in
    block order, ``indexes`` ascending) fill their packs in order, each pack one run of
    consecutive blocks; ``None`` when they do not (a pack's blocks interleave another's)."""
    ranges: list[tuple[int, int, int]] = []
    for index, pack in zip(indexes, packs, strict=True):
        if ranges and ranges[-1][0] == pack:
            ranges[-1] = (pack, ranges[-1][1], index)
        elif ranges and (pack < ranges[-1][0] or index <= ranges[-1][2]):
            return None
        else:
            ranges.append((pack, index, index))
    return ranges


async def repack(
    conn: asyncpg.Connection,
    run_id: str,
    blocks: Sequence[tuple[str, int]],
    packs: Sequence[int],
    change: PlanChange,
) -> None:
    """Move the unstarted blocks (``(block_uid, block_index)`` in block order; every
    pending block in packs from ``change.first_pack`` on) to their new packs, set the run's
    pack count and record the change, in the caller's transaction (the run row locked for
    planning).

    The blocks are moved a bounded number of packs per statement. When each pack is a run
    of consecutive blocks (what planning makes), a statement names the packs' block ranges,
    not every block: half the time of joining a million block ids."""
    ranges = pack_ranges([i for _, i in blocks], packs)
    moved = 0
    # A custom plan for each statement. After five runs of a prepared statement Postgres may
    # switch to its generic plan, which does not know the arrays' lengths: for the ranges it
    # scanned all the run's overlays against every range (60 s a statement at a million
    # blocks) instead of one index range scan per pack (under a second).
    await conn.execute("set local plan_cache_mode = force_custom_plan")
    if ranges is not None:
        for at in range(0, len(ranges), REPACK_PACKS_PER_STATEMENT):
            part = ranges[at : at + REPACK_PACKS_PER_STATEMENT]
            status = await conn.execute(
                """update overlays o set pack_index = t.p
                   from unnest($2::int[], $3::int[], $4::int[]) as t(p, lo, hi)
                   where o.run_id = $1 and o.block_index between t.lo and t.hi
                     and o.status = 'pending' and o.pack_index >= $5""",
                run_id,
                [r[0] for r in part],
                [r[1] for r in part],
                [r[2] for r in part],
                change.first_pack,
            )
            moved += int(status.split()[-1])
    else:
        step = max(1, len(blocks) * REPACK_PACKS_PER_STATEMENT // max(1, len(set(packs))))
        for at in range(0, len(blocks), step):
            status = await conn.execute(
                """update overlays o set pack_index = t.p
                   from unnest($2::text[], $3::int[]) as t(u, p)
                   where o.run_id = $1 and o.block_uid = t.u and o.status = 'pending'""",
                run_id,
                [u for u, _ in blocks[at : at + step]],
                list(packs[at : at + step]),
            )
            moved += int(status.split()[-1])
    # The run's row is locked for planning: nothing else moves its pending blocks.
    assert moved == len(blocks), f"re-plan moved {moved} blocks of {len(blocks)}"
    await conn.execute(
        "update runs set pack_count = $2 where run_id = $1", run_id, change.packs_after
    )
    await conn.execute(
        """insert into plan_changes (run_id, first_pack, packs_before, packs_after, ratios,
                                     kind, pack_size, gate)
           values ($1, $2, $3, $4, $5, $6, $7, $8)""",
        run_id,
        change.first_pack,
        change.packs_before,
        change.packs_after,
        change.ratios,
        change.kind,
        change.pack_size,
        change.gate,
    )


_CHANGE_COLUMNS = "first_pack, packs_before, packs_after, ratios, kind, pack_size, gate"


async def changes(
    conn: asyncpg.Connection | asyncpg.Pool, run_id: str, *, kind: str | None = None
) -> list[PlanChange]:
    """The run's re-plans (only those of ``kind`` when given), in order."""
    rows = await conn.fetch(
        f"""select {_CHANGE_COLUMNS} from plan_changes
            where run_id = $1 and ($2::text is null or kind = $2)
            order by first_pack, changed_at""",
        run_id,
        kind,
    )
    return [_change(r) for r in rows]


async def change_texts(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> list[str]:
    """What the run's re-plans changed, in order (:meth:`PlanChange.text`)."""
    return [c.text() for c in await changes(conn, run_id)]


def _change(row: asyncpg.Record) -> PlanChange:
    return PlanChange(
        row["first_pack"],
        row["packs_before"],
        row["packs_after"],
        row["ratios"],
        row["kind"],
        row["pack_size"],
        row["gate"],
    )
