"""Overlays: one row per run x block, and every change of its state.

The transitions, all of them here and nowhere else::

    (planned)    -> pending        insert_plan (with each block's answer key)
    (planned)    -> ai_complete    insert_plan, reused: an earlier run's model answer for
                                   the same answer key (blockbatch/core/reuse.py, reusable_answers);
                                   no attempt, no pack, the source run and call recorded
                                   on the row (born so, like a pending one: one write per
                                   block, so a 100,000-block run still plans in seconds)
    (planned)    -> set_aside      insert_plan: a block of a set-aside type (running header,
                                   navigation, ...: blockbatch/core/blocks.py SET_ASIDE_TYPES)
                                   in a run that does not include them; terminal, never sent
    (planned)    -> pending        insert_plan, follows: a block whose answer key an
                                   earlier block of the same run has (``same_as``), in
                                   no pack: asked once per run
    pending      -> ai_complete    follows (the trigger of migration 031): the block it
    pending      -> failed         waits for ended so, in the same transaction; it takes
    pending      -> cancelled      that outcome (answer, reason, call) as it is
    pending      -> ai_complete    take_answered: a stream row accepted as the duplicate
                                   (``same_as``) of a row its run already answered takes
                                   that answer (the model's own, unedited) and call, in the
                                   transaction that accepts it: asked once per stream
    pending      -> ai_complete    apply_answer (a valid result; charges one attempt)
    pending      -> pending        apply_answer (an invalid result; charges one attempt)
    pending      -> failed         apply_answer (attempts used up), fail_pending (a reason
                                   such as "block is too large"), end_pending at the end
                                   of a completed run ("no pack finished this block")
    pending      -> cancelled      end_pending at the end of a cancelled or failed run
    ai_complete  -> ai_complete    edit_staging (a person changed one staged field; the
                                   value is checked against the schema first; the model's
                                   own answer is kept in model_answer)
    ai_complete  -> confirmed      decide "confirm" (a person accepted the staged result:
                                   staging copied to confirmed)
    ai_complete  -> rejected       decide "reject" (a person refused it: staging kept for
                                   the record, nothing confirmed)
    confirmed    -> ai_complete    reopen (a person takes a confirmed block back to correct
                                   it: confirmed cleared, the staged values stay; the
                                   staged answer is kept in model_answer, so the quality
                                   gate never re-asks a block a person has reviewed)
    failed       -> pending        reset_for_retry (a retry of the finished run; also
    cancelled    -> pending        cancelled blocks when asked): attempts, reason, error,
                                   staging and call cleared, a new pack_index
    ai_complete  -> pending        reask_for_gate: only by the quality gate's re-plan, in
                                   its transaction (blockbatch/core/quality.py), only for the model's
                                   own unreviewed answers (not edited: no model_answer;
                                   not reused), never confirmed, rejected or edited ones:
                                   a block answered in a pack larger than the gate's new
                                   size goes to a new pack at that size; attempts, staging,
                                   pack path and call cleared (the ledger and
                                   overlay_changes keep the earlier answer)
    ai_complete  -> ai_complete    escalate_answer: an escalation's answer from a stronger
    failed       -> ai_complete    model (docs/ESCALATION.md), only while the overlay still
                                   holds the first pass's outcome (the same call's answer,
                                   unedited, unreviewed; or still failed): staging, call
                                   and pack path the escalation call's, ``escalated_from``
                                   the first call, reason cleared, answer key cleared (the
                                   answer is not the run's model's, so no run reuses it
                                   as one)

Every move to ``failed`` or ``cancelled`` also sets ``reason_code`` (blockbatch/core/reasons.py):
apply_answer from what the answer said of the block (``invalid_value``,
``missing_from_answer``, ``truncated``, ``malformed_answer``), fail_pending from its
caller (the pack policy's ``Decision.code``), end_pending from how the run ended
(``unfinished``, ``cancelled``, or a fatal error's code). A move to ``ai_complete`` clears it,
except the review flag ``ungrounded``: apply_answer sets it on an answer of a schema asking
for evidence when some value's quote is not in its block (blockbatch/core/evidence.py), and stores
each value's quote and span in ``evidence`` with the staged answer (migration 025; cleared
with staging by reset_for_retry and reask_for_gate).

Every change of status, staging or confirmed also leaves a row in ``overlay_changes``,
written by a trigger (migration 005), so no transition here can go unrecorded. The four
review transitions (edit, confirm, reject, reopen) also write a ``review_actions`` row (who,
when, before, after; migrations 009 and 022) in the same statement or transaction as the
overlay.

Every write is conditional on the state it leaves (``status = 'pending'``,
``status = 'ai_complete'``), so a retried activity, or a second worker running a stale
attempt, never writes a block twice. A result maps to its block by ``block_uid`` only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import asyncpg

from blockbatch.core.call_types import ApplyResultsOutput
from blockbatch.core.commands import PROG, for_any_reader
from blockbatch.core.endpoint import Endpoint
from blockbatch.core.evidence import ground, ungrounded
from blockbatch.core.outcome import end_code
from blockbatch.core.policy import attempt_limit
from blockbatch.core.reasons import ReasonCode
from blockbatch.core.results import parse_results
from blockbatch.core.reuse import REUSABLE
from blockbatch.core.review import REVIEWABLE, EditError, edited_overlay
from blockbatch.core.run_types import RunStatus
from blockbatch.core.schema import SchemaSpec
from blockbatch.store import ledger
from blockbatch.store.repo import NotFound
from blockbatch.store.runs import BlockSize, lock_run

#: A block the run never sent once its budget ran out: its stored ``last_error`` (read
#: later, by any front door or in an export: the command is the console script's).
BUDGET_UNSENT_TEXT = for_any_reader(
    "the run's budget ran out before this block was sent; no call was "
    f"made for it (`{PROG} retry RUN_ID --max-cost USD` finishes it)"
)


#: Overlays a run's plan inserts per statement. A million in one statement overran the
#: pool's 60 s command timeout on a loaded machine, and its retry did again (issue 39).
PLAN_ROWS_PER_STATEMENT = 20_000
#: A plan of at least this many overlays refreshes the planner's statistics of overlays
#: before it returns (``analyze``, in the plan's transaction).
ANALYZE_AFTER_ROWS = 10_000


async def insert_plan(
    conn: asyncpg.Connection,
    run_id: str,
    blocks: Sequence[BlockSize],
    pack_of: Sequence[int | None],
    keys: Sequence[str | None] | None = None,
    reused: Mapping[str, ReusableAnswer] | None = None,
    same_as: Sequence[str | None] | None = None,
    set_aside: Collection[str] = (),
) -> int:
    """Create the run's overlays: block ``i`` with answer key ``keys[i]``, ``pending`` in
    pack ``pack_of[i]``, or, when ``reused`` has an earlier answer for its block_uid,
    ``ai_complete`` with that answer as it is, in no pack, no attempt charged, the source
    run and call recorded, its evidence with it (reviewed like any other), and its origin
    added to the run's ``reused_endpoints``. ``same_as[i]``: the block of this run whose
    outcome block ``i`` waits for (the same answer key; it is in no pack). A block_uid in
    ``set_aside`` is ``set_aside``, in no pack, never called: a terminal state no
    transition leaves. Returns how many were reused."""
    reused = reused or {}
    aside = set(set_aside)
    uids = [b.block_uid for b in blocks]
    found = [reused.get(u) for u in uids]
    key_of = list(keys) if keys is not None else [None] * len(blocks)
    waits_for = list(same_as) if same_as is not None else [None] * len(blocks)
    for at in range(0, len(blocks), PLAN_ROWS_PER_STATEMENT):
        part = slice(at, at + PLAN_ROWS_PER_STATEMENT)
        some = found[part]
        await conn.execute(
            """insert into overlays (run_id, block_uid, block_index, pack_index, answer_key,
                                     status, staging, reused_from_run_id, reused_from_call_id,
                                     evidence, reason_code, same_as)
               select $1, u, i, p, k,
                      case when s then 'set_aside'
                           when r is null then 'pending' else 'ai_complete' end,
                      a, r, c, e, g, f
               from unnest($2::text[], $3::int[], $4::int[], $5::text[], $6::jsonb[],
                           $7::text[], $8::bigint[], $9::jsonb[], $10::text[], $11::text[],
                           $12::bool[])
                    as t(u, i, p, k, a, r, c, e, g, f, s)
               on conflict do nothing""",
            run_id,
            uids[part],
            [b.block_index for b in blocks[part]],
            list(pack_of[part]),
            key_of[part],
            [f.answer if f else None for f in some],
            [f.run_id if f else None for f in some],
            [f.call_id if f else None for f in some],
            [f.evidence if f else None for f in some],
            ["ungrounded" if f and ungrounded(f.evidence) else None for f in some],
            waits_for[part],
            [u in aside for u in uids[part]],
        )
    if len(blocks) >= ANALYZE_AFTER_ROWS:
        # A run's next statements (its first re-plan moments later, its packs' reads) are
        # planned from overlays' statistics, in which a large run just planned is not yet:
        # autovacuum analyses a minute later at best, and never when the run is small beside
        # the table. Planned as a run of a few rows, the first re-plan of a 100,000-block
        # run joined every pending block against every pack's range: 54 s in which no pack
        # ran (bench/scale.py, issue 39). Sampled (30,000 rows at the default target): a
        # fraction of a second, once a large run.
        await conn.execute("analyze overlays (run_id, status, pack_index, block_index)")
    origins = sorted({f.origin for f in found if f is not None})
    if origins:
        # A reused answer keeps its origin: the run says who gave its answers (migration 031).
        await conn.execute(
            """update runs set reused_endpoints = array(
                   select distinct e from unnest(reused_endpoints || $2::text[]) as e order by 1)
               where run_id = $1""",
            run_id,
            origins,
        )
    return sum(f is not None for f in found)


#: The statuses are spelled out (not a parameter) so that Postgres can match the partial
#: index ``overlays_answer_key`` of migration 010, whose predicate lists the same ones.
#: The call that first paid for an answer says who gave it (``llm_calls.provider`` and
#: ``endpoint_host``): only an answer of the endpoint that would answer now is reused.
_REUSABLE_SQL = f"""
select distinct on (o.answer_key) o.answer_key, coalesce(o.model_answer, o.staging) as answer,
       o.evidence, coalesce(o.reused_from_run_id, o.run_id) as run_id, c.call_id,
       c.provider || coalesce(' ' || c.endpoint_host, '') as origin
from overlays o
join llm_calls c on c.call_id = coalesce(o.reused_from_call_id, o.call_id)
where o.answer_key = any($1::text[]) and o.answer_key is not null
  and o.status in ({", ".join(f"'{s}'" for s in REUSABLE)})
  and c.provider = $2 and c.endpoint_host is not distinct from $3
order by o.answer_key, c.call_id desc
"""


@dataclass(frozen=True)
class ReusableAnswer:
    """An earlier run's model answer for one answer key, and the call that paid for it."""

    answer: dict[str, Any]
    run_id: str
    call_id: int | None
    #: The answer's grounded quotes (a schema asking for evidence): the answer key holds the
    #: block's content and the request, so its spans hold for the reusing block too.
    evidence: dict[str, Any] | None = None
    #: Who gave it: the paying call's endpoint (``blockbatch.core.endpoint.Endpoint.label``).
    origin: str = "anthropic"


async def withhold_from_reuse(
    conn: asyncpg.Connection | asyncpg.Pool, run_ids: Sequence[str]
) -> None:
    """Keep these runs' answers out of reuse (their answer keys cleared; no state changes).

    ``calibrate``'s packed runs answer at sizes chosen to find where answers go wrong:
    a later run must not reuse one of those answers for a block (its alone answer, from
    the calibration's baseline run, stays reusable).
    """
    await conn.execute(
        "update overlays set answer_key = null where run_id = any($1::text[]) "
        "and answer_key is not null",
        list(run_ids),
    )


async def reusable_answers(
    conn: asyncpg.Connection, keys: Sequence[str], endpoint: Endpoint | None
) -> dict[str, ReusableAnswer]:
    """For each of ``keys`` that an earlier overlay answered: that answer (one index scan).

    Only overlays the model answered and nobody rejected (``blockbatch.core.reuse.REUSABLE``), and of
    them the model's own answer (``model_answer`` once a person edited staging). An answer
    that was itself reused names the run and call that first paid for it. Where several
    runs answered a key, the newest paid answer wins.

    Only answers ``endpoint`` gave (the same provider and host; not the key): the
    simulator's answers never stand in for Claude's, nor one base URL's for another's. An
    answer whose paying call is not in the ledger has no known origin and is not reused;
    with no ``endpoint`` (none known to answer now) nothing is.
    """
    if endpoint is None:
        return {}
    distinct = list(set(keys))
    found: dict[str, ReusableAnswer] = {}
    # Each key's answer is its own (the newest per key): asking a bounded number of keys a
    # statement finds the same, and no statement grows with the document (issue 39).
    for at in range(0, len(distinct), PLAN_ROWS_PER_STATEMENT):
        rows = await conn.fetch(
            _REUSABLE_SQL,
            distinct[at : at + PLAN_ROWS_PER_STATEMENT],
            endpoint.provider,
            endpoint.host,
        )
        found.update(
            (
                r["answer_key"],
                ReusableAnswer(r["answer"], r["run_id"], r["call_id"], r["evidence"], r["origin"]),
            )
            for r in rows
            if r["answer"] is not None
        )
    return found


@dataclass(frozen=True)
class PendingBlock:
    """A block still to be answered, with what a request needs of it."""

    block_uid: str
    block_type: str
    block_content: str
    est_tokens: int


async def pending_blocks(
    conn: asyncpg.Connection, run_id: str, pack_index: int, block_uids: list[str] | None
) -> list[PendingBlock]:
    """The pending blocks of a pack (``block_uids=None``: all of ``pack_index``), in order."""
    if block_uids is None:
        rows = await conn.fetch(
            """select b.block_uid, b.block_type, b.block_content, b.est_tokens
               from overlays o join blocks b using (block_uid)
               where o.run_id = $1 and o.pack_index = $2 and o.status = 'pending'
               order by o.block_index""",
            run_id,
            pack_index,
        )
    else:
        rows = await conn.fetch(
            """select b.block_uid, b.block_type, b.block_content, b.est_tokens
               from overlays o join blocks b using (block_uid)
               where o.run_id = $1 and o.block_uid = any($2::text[]) and o.status = 'pending'
               order by o.block_index""",
            run_id,
            block_uids,
        )
    return [
        PendingBlock(r["block_uid"], r["block_type"], r["block_content"], r["est_tokens"])
        for r in rows
    ]


async def pending_by_pack(conn: asyncpg.Connection, run_id: str) -> dict[int, list[str]]:
    """The run's pending block_uids by planned pack, both in order (not the duplicates
    waiting for another block's outcome: they are in no pack)."""
    rows = await conn.fetch(
        """select block_uid, pack_index from overlays
           where run_id = $1 and status = 'pending' and same_as is null
           order by pack_index, block_index""",
        run_id,
    )
    packs: dict[int, list[str]] = {}
    for r in rows:
        packs.setdefault(r["pack_index"], []).append(r["block_uid"])
    return packs


async def still_pending(conn: asyncpg.Connection, run_id: str, uids: list[str]) -> list[str]:
    """Those of ``uids`` that are still pending, in block order."""
    return list(
        await conn.fetchval(
            """select coalesce(array_agg(block_uid order by block_index), '{}')
           from overlays where run_id = $1 and block_uid = any($2::text[])
             and status = 'pending'""",
            run_id,
            uids,
        )
    )


async def packs_done(conn: asyncpg.Connection, run_id: str) -> int:
    """How many planned packs have no pending block left."""
    return int(
        await conn.fetchval(
            """select count(*) from (select pack_index from overlays
           where run_id = $1 and pack_index is not null
           group by pack_index having bool_and(status <> 'pending')) d""",
            run_id,
        )
    )


async def apply_answer(
    conn: asyncpg.Connection,
    run_id: str,
    call_id: int,
    pack_path: str,
    max_block_attempts: int,
    spec: SchemaSpec,
) -> ApplyResultsOutput:
    """Validate a ledger answer by block_uid and write the valid overlays to staging.

    An answer to a call sent with short ids is mapped back through the alias map recorded
    on that call's ledger row (``ledger.answer_to_apply``).

    One transaction, holding the ledger row ``for update``: applied once, and a repeat
    returns the recorded outcome. Per-block failures consume an attempt (an invalid
    result, or any failure of a pack of one); missing or duplicate results in a larger
    pack do not (the pack is split instead).

    Raises:
        ValueError: the call has no recorded response.
    """
    async with conn.transaction():
        call = await ledger.answer_to_apply(conn, run_id, call_id)
        if call.outcome is not None:
            return call.outcome
        # Short ids map back through the call's own ledger record, nothing else.
        parsed = parse_results(call.response, call.block_uids, spec, call.block_aliases)
        evidence = (
            await _grounded(conn, parsed.valid, parsed.evidence)
            if spec.prompt_config.evidence
            else None
        )
        completed = await stage_valid(conn, run_id, parsed.valid, pack_path, call_id, evidence)
        charged: dict[str, str] = dict(parsed.invalid)
        if len(call.block_uids) == 1:
            for uid in parsed.unfinished:
                charged.setdefault(uid, parsed.summary())
        codes = {uid: parsed.reason_code(uid) or "unfinished" for uid in charged}
        # A lone refused block fails now: the same model refuses it again (blockbatch/core/policy.py).
        # ``PackResults.refusal`` gives the unfinished blocks the code ``refused``.
        limit = attempt_limit(len(call.block_uids), "refused" in codes.values(), max_block_attempts)
        failed = await _charge(conn, run_id, charged, codes, pack_path, call_id, limit)
        pending = set(await still_pending(conn, run_id, parsed.unfinished))
        outcome = ApplyResultsOutput(
            completed=completed,
            failed=failed,
            remaining=[u for u in parsed.unfinished if u in pending],
            mapping_failed=parsed.mapping_failed,
            reason=parsed.summary(),
            refusal=parsed.refusal,
            failed_reasons=dict(Counter(codes[uid] for uid in failed)),
        )
        await ledger.save_apply_outcome(conn, call_id, outcome)
    return outcome


async def _grounded(
    conn: asyncpg.Connection,
    valid: Mapping[str, dict[str, Any]],
    quotes: Mapping[str, Mapping[str, str]],
) -> dict[str, dict[str, Any]]:
    """Each valid answer's quotes looked up in its block's content (blockbatch/core/evidence.py)."""
    rows = await conn.fetch(
        "select block_uid, block_content from blocks where block_uid = any($1::text[])",
        list(valid),
    )
    text = {r["block_uid"]: r["block_content"] for r in rows}
    return {uid: ground(quotes.get(uid, {}), valid[uid], text.get(uid, "")) for uid in valid}


async def stage_valid(
    conn: asyncpg.Connection,
    run_id: str,
    valid: dict[str, dict[str, Any]],
    pack_path: str,
    call_id: int,
    evidence: Mapping[str, dict[str, Any]] | None = None,
) -> int:
    """pending -> ai_complete for valid results (apply_answer's write; bench/review_page.py
    seeds a large run with it); returns how many moved. ``evidence``: each block's grounded
    quotes (``None``: the schema asks for none); a block with an ungrounded value is
    flagged ``ungrounded``."""
    uids = list(valid)
    found = [evidence.get(u) for u in uids] if evidence is not None else [None] * len(uids)
    return int(
        await conn.fetchval(
            """with v as (
               select u, o, e, c
               from unnest($2::text[], $3::jsonb[], $6::jsonb[], $7::text[]) as t(u, o, e, c))
           , upd as (
               update overlays set status = 'ai_complete', staging = v.o, evidence = v.e,
                      attempt_count = attempt_count + 1, last_error = null,
                      reason_code = v.c, pack_path = $4, call_id = $5, updated_at = now()
               from v where run_id = $1 and block_uid = v.u and status = 'pending'
               returning 1)
           select count(*) from upd""",
            run_id,
            uids,
            [valid[u] for u in uids],
            pack_path,
            call_id,
            found,
            ["ungrounded" if ungrounded(e) else None for e in found],
        )
    )


async def _charge(
    conn: asyncpg.Connection,
    run_id: str,
    charged: dict[str, str],
    codes: dict[str, ReasonCode],
    pack_path: str,
    call_id: int,
    max_block_attempts: int,
) -> list[str]:
    """Charge one attempt to each block with its reason; returns those now ``failed``.

    A block that fails now gets its code in ``reason_code``; one left pending keeps none.
    """
    if not charged:
        return []
    uids = list(charged)
    rows = await conn.fetch(
        """with c as (select u, r, k from unnest($2::text[], $3::text[], $7::text[])
                      as t(u, r, k))
           update overlays set attempt_count = attempt_count + 1,
                  last_error = c.r, pack_path = $4, call_id = $5,
                  status = case when attempt_count + 1 >= $6 then 'failed'
                                else status end,
                  reason_code = case when attempt_count + 1 >= $6 then c.k
                                     else reason_code end,
                  updated_at = now()
           from c where run_id = $1 and block_uid = c.u and status = 'pending'
           returning block_uid, status""",
        run_id,
        uids,
        [charged[u] for u in uids],
        pack_path,
        call_id,
        max_block_attempts,
        [codes[u] for u in uids],
    )
    return [r["block_uid"] for r in rows if r["status"] == "failed"]


async def fail_pending(
    conn: asyncpg.Connection,
    run_id: str,
    reason: str,
    pack_path: str,
    *,
    reason_code: ReasonCode,
    block_uids: list[str] | None = None,
    pack_index: int | None = None,
) -> int:
    """pending -> failed with a readable reason (one attempt charged); returns how many.

    Args:
        conn: the connection.
        run_id: the run.
        reason: the ``last_error`` (cut to 2,000 characters).
        pack_path: the pack that gave up on the blocks.
        reason_code: the ``reason_code`` (``oversized``, ``prompt_too_long``,
            ``request_rejected``, ``api_unavailable``, ...).
        block_uids: these blocks; when ``None``, every pending block of ``pack_index``.
        pack_index: the planned pack, used when ``block_uids`` is ``None``.
    """
    if block_uids is None:
        result = await conn.execute(
            """update overlays set status = 'failed', last_error = $3, pack_path = $4,
                      reason_code = $5, attempt_count = attempt_count + 1, updated_at = now()
               where run_id = $1 and pack_index = $2 and status = 'pending'""",
            run_id,
            pack_index,
            reason[:2000],
            pack_path,
            reason_code,
        )
    else:
        result = await conn.execute(
            """update overlays set status = 'failed', last_error = $3, pack_path = $4,
                      reason_code = $5, attempt_count = attempt_count + 1, updated_at = now()
               where run_id = $1 and block_uid = any($2::text[]) and status = 'pending'""",
            run_id,
            block_uids,
            reason[:2000],
            pack_path,
            reason_code,
        )
    return int(result.split()[-1])


async def end_pending(
    conn: asyncpg.Connection, run_id: str, status: RunStatus, error: str | None
) -> int:
    """End the blocks still pending when the run ends; returns how many it ended.

    A completed run: ``failed`` (a pack ended without finishing them, say so; code
    ``unfinished``); a cancelled or failed run: ``cancelled``, with the run's error as the
    reason (code of the fatal error that stopped the run, ``key_rejected``, ``spend_limit``,
    ``billing`` or ``model_unavailable``, else ``cancelled``).
    """
    if status == "budget_exhausted":
        # Packs the run never started once its budget ran out: no call was made for them;
        # they end failed, so that `retry --max-cost` takes them.
        sql = """update overlays set status = 'failed', updated_at = now(),
                        last_error = $4, reason_code = 'budget_exhausted'"""
        args: tuple[Any, ...] = (BUDGET_UNSENT_TEXT,)
    elif status in ("completed", "completed_with_failures"):
        sql = """update overlays set status = 'failed', updated_at = now(),
                        last_error = coalesce(last_error || '; ', '')
                                     || 'no pack finished this block',
                        reason_code = 'unfinished'"""
        args = ()
    else:
        sql = """update overlays set status = 'cancelled', updated_at = now(),
                        last_error = coalesce(last_error, $4), reason_code = $5"""
        args = (f"run {status}: {error}" if error else None, end_code(status, error))
    # A run cancelled at its start ends all its blocks: a bounded range of them a statement
    # (a million in one would overrun the pool's command timeout, issue 39).
    last = await conn.fetchval("select max(block_index) from overlays where run_id = $1", run_id)
    ended = 0
    for lo in range(0, (last if last is not None else -1) + 1, PLAN_ROWS_PER_STATEMENT):
        done = await conn.execute(
            sql
            + """ where run_id = $1 and status = 'pending'
                    and block_index >= $2 and block_index < $3""",
            run_id,
            lo,
            lo + PLAN_ROWS_PER_STATEMENT,
            *args,
        )
        ended += int(done.split()[-1])  # the command tag: "UPDATE <rows>"
    return ended


async def reset_for_retry(
    conn: asyncpg.Connection,
    run_id: str,
    uids: Sequence[str],
    pack_of: Sequence[int],
    statuses: Sequence[str],
) -> int:
    """failed (or cancelled) -> pending for a retry, block ``uids[i]`` in pack ``pack_of[i]``.

    Everything the earlier attempts left is cleared (attempts, reason code, last error,
    staging, pack path, call; a duplicate no longer waits for another block: each retried
    block is in a pack of its own plan); the ledger and ``overlay_changes`` keep that history. Only
    blocks still in one of ``statuses`` move; returns how many did.
    """
    result = await conn.execute(
        """update overlays o set status = 'pending', pack_index = t.p, attempt_count = 0,
                  reason_code = null, last_error = null, staging = null, pack_path = null,
                  call_id = null, evidence = null, same_as = null, updated_at = now()
           from unnest($2::text[], $3::int[]) as t(u, p)
           where o.run_id = $1 and o.block_uid = t.u and o.status = any($4::text[])""",
        run_id,
        list(uids),
        list(pack_of),
        list(statuses),
    )
    return int(result.split()[-1])


async def take_answered(conn: asyncpg.Connection, run_id: str, uids: Sequence[str]) -> int:
    """pending -> ai_complete for duplicates (``same_as``) whose block is answered already:
    each takes that block's model answer (before any edit), evidence, call and pack path,
    as the trigger of migration 031 hands an outcome to the followers of a block as it
    lands. Only ``uids`` still pending, whose block is ``ai_complete`` or ``confirmed``;
    returns how many moved."""
    result = await conn.execute(
        """update overlays f set status = 'ai_complete',
                  staging = coalesce(l.model_answer, l.staging), evidence = l.evidence,
                  reason_code = l.reason_code, last_error = l.last_error, call_id = l.call_id,
                  pack_path = l.pack_path, updated_at = now()
           from overlays l
           where f.run_id = $1 and f.block_uid = any($2::text[]) and f.status = 'pending'
             and l.run_id = f.run_id and l.block_uid = f.same_as
             and l.status in ('ai_complete', 'confirmed')""",
        run_id,
        list(uids),
    )
    return int(result.split()[-1])


async def reask_for_gate(
    conn: asyncpg.Connection, run_id: str, uids: Sequence[str], pack_of: Sequence[int]
) -> int:
    """ai_complete -> pending for the quality gate's re-ask, block ``uids[i]`` in pack
    ``pack_of[i]``, in the caller's transaction (the run row locked for planning).

    Only the model's own answers move: ``ai_complete``, never edited (``model_answer``
    unset), not reused from an earlier run; a person's confirmed, rejected or edited
    block stays as it is. Returns how many moved.
    """
    result = await conn.execute(
        """update overlays o set status = 'pending', pack_index = t.p, attempt_count = 0,
                  reason_code = null, last_error = null, staging = null, pack_path = null,
                  call_id = null, evidence = null, updated_at = now()
           from unnest($2::text[], $3::int[]) as t(u, p)
           where o.run_id = $1 and o.block_uid = t.u and o.status = 'ai_complete'
             and o.model_answer is null and o.reused_from_run_id is null""",
        run_id,
        list(uids),
        list(pack_of),
    )
    # Their duplicates that took the same answer, unreviewed, wait for the new one.
    await conn.execute(
        """update overlays set status = 'pending', reason_code = null, last_error = null,
                  staging = null, pack_path = null, call_id = null, evidence = null,
                  updated_at = now()
           where run_id = $1 and same_as = any($2::text[]) and status = 'ai_complete'
             and model_answer is null""",
        run_id,
        list(uids),
    )
    return int(result.split()[-1])


async def escalate_answer(
    conn: asyncpg.Connection,
    run_id: str,
    block_uid: str,
    *,
    first_call_id: int | None,
    answer: dict[str, Any],
    call_id: int,
    pack_path: str,
    evidence: dict[str, Any] | None,
) -> bool:
    """ai_complete or failed -> ai_complete with an escalation's answer (see the module
    docstring); ``False`` when the overlay no longer holds the first pass's outcome."""
    moved = await conn.fetchval(
        """update overlays set status = 'ai_complete', staging = $4, evidence = $7,
                  reason_code = $8, last_error = null, call_id = $5, pack_path = $6,
                  escalated_from = call_id, answer_key = null,
                  updated_at = now()
           where run_id = $1 and block_uid = $2
             and ((status = 'ai_complete' and call_id = $3 and model_answer is null
                   and reused_from_run_id is null)
                  or (status = 'failed' and $3::bigint is null))
           returning 1""",
        run_id,
        block_uid,
        first_call_id,
        answer,
        call_id,
        pack_path,
        evidence,
        "ungrounded" if evidence is not None and ungrounded(evidence) else None,
    )
    return moved is not None


@dataclass
class Decided:
    """What :func:`decide` did; nothing changed when ``unknown`` or ``unready`` is set."""

    #: Blocks moved by this decision, in block order.
    moved: list[str]
    #: Asked-for blocks already in the decision's status (left as they were).
    already: list[str]
    #: Asked-for block_uids the run does not have.
    unknown: list[str]
    #: Asked-for blocks that cannot take the decision, as ``"<uid> (<status>)"``.
    unready: list[str]
    #: Confirmed blocks of the run afterwards (``None`` when nothing was done).
    total_confirmed: int | None


#: Each decision's statement: move the blocks and log each move (confirm: before null,
#: after the confirmed overlay; reject: before the staged overlay, after null).
_DECIDE_SQL = {
    "confirm": """
        with done as (
            update overlays set status = 'confirmed', confirmed = staging,
                   confirmed_at = now(), updated_at = now()
            where run_id = $1 and status = 'ai_complete'
              and ($2::text[] is null or block_uid = any($2::text[]))
            returning block_uid, block_index, staging),
        logged as (
            insert into review_actions (run_id, block_uid, action, reviewer, before, after,
                                        old_status, new_status)
            select $1, block_uid, 'confirm', $3, null, staging, 'ai_complete', 'confirmed'
            from done)
        select block_uid from done order by block_index""",
    "reject": """
        with done as (
            update overlays set status = 'rejected', updated_at = now()
            where run_id = $1 and status = 'ai_complete'
              and ($2::text[] is null or block_uid = any($2::text[]))
            returning block_uid, block_index, staging),
        logged as (
            insert into review_actions (run_id, block_uid, action, reviewer, before, after,
                                        old_status, new_status)
            select $1, block_uid, 'reject', $3, staging, null, 'ai_complete', 'rejected'
            from done)
        select block_uid from done order by block_index""",
}
_DECIDED_STATUS = {"confirm": "confirmed", "reject": "rejected"}


async def decide(
    conn: asyncpg.Connection,
    run_id: str,
    uids: list[str] | None,
    decision: Literal["confirm", "reject"],
    reviewer: str,
) -> Decided:
    """ai_complete -> confirmed or rejected, all or nothing, each move logged for ``reviewer``.

    Args:
        conn: the connection; the run row is locked until the transaction ends.
        run_id: the run (the caller checks that it exists).
        uids: these blocks (each must be ``ai_complete`` or already decided the same way);
            ``None``: every ``ai_complete`` block of the run.
        decision: ``confirm`` (staging copied to confirmed) or ``reject``.
        reviewer: who decided (recorded in ``review_actions``).
    """
    target = _DECIDED_STATUS[decision]
    async with conn.transaction():
        await lock_run(conn, run_id)
        already: list[str] = []
        if uids is not None:
            checked = await _already_at(conn, run_id, uids, source="ai_complete", target=target)
            if isinstance(checked, Decided):
                return checked
            already = checked
        moved = [
            r["block_uid"] for r in await conn.fetch(_DECIDE_SQL[decision], run_id, uids, reviewer)
        ]
        total = await _recount_confirmed(conn, run_id)
    return Decided(moved, already, [], [], total)


async def _already_at(
    conn: asyncpg.Connection, run_id: str, uids: list[str], *, source: str, target: str
) -> list[str] | Decided:
    """The blocks of ``uids`` already at ``target``, when every one is at ``source`` or
    ``target``; else the refusal, naming the unknown blocks and those in another status."""
    rows = await conn.fetch(
        """select block_uid, status from overlays
           where run_id = $1 and block_uid = any($2::text[])""",
        run_id,
        uids,
    )
    status = {r["block_uid"]: r["status"] for r in rows}
    unknown = [u for u in uids if u not in status]
    unready = [
        f"{u} ({status[u]})" for u in uids if u in status and status[u] not in (source, target)
    ]
    if unknown or unready:
        return Decided([], [], unknown, unready, None)
    return [u for u in uids if status[u] == target]


async def _recount_confirmed(conn: asyncpg.Connection, run_id: str) -> int:
    """The run's ``blocks_confirmed`` counted again after a review decision; returns it."""
    total: int = await conn.fetchval(
        """update runs set blocks_confirmed = (select count(*) from overlays
               where run_id = $1 and status = 'confirmed')
           where run_id = $1 returning blocks_confirmed""",
        run_id,
    )
    return total


_REOPEN_SQL = """
    with done as (
        update overlays o set status = 'ai_complete', confirmed = null, confirmed_at = null,
               model_answer = coalesce(o.model_answer, o.staging), updated_at = now()
        from overlays old
        where o.run_id = $1 and o.status = 'confirmed' and o.block_uid = any($2::text[])
          and old.run_id = o.run_id and old.block_uid = o.block_uid
        returning o.block_uid, o.block_index, old.confirmed),
    logged as (
        insert into review_actions (run_id, block_uid, action, reviewer, before, after,
                                    old_status, new_status)
        select $1, block_uid, 'reopen', $3, confirmed, null, 'confirmed', 'ai_complete'
        from done)
    select block_uid from done order by block_index"""


async def reopen(conn: asyncpg.Connection, run_id: str, uids: list[str], reviewer: str) -> Decided:
    """confirmed -> ai_complete, all or nothing, each move logged for ``reviewer`` (before:
    the confirmed overlay; after: null), so a person can correct a confirmed block.

    Args:
        conn: the connection; the run row is locked until the transaction ends.
        run_id: the run (the caller checks that it exists).
        uids: these blocks, each ``confirmed`` or already ``ai_complete`` (left as it is).
        reviewer: who reopened them.
    """
    async with conn.transaction():
        await lock_run(conn, run_id)
        already = await _already_at(conn, run_id, uids, source="confirmed", target=REVIEWABLE)
        if isinstance(already, Decided):
            return already
        moved = [r["block_uid"] for r in await conn.fetch(_REOPEN_SQL, run_id, uids, reviewer)]
        total = await _recount_confirmed(conn, run_id)
    return Decided(moved, already, [], [], total)


@dataclass(frozen=True)
class Edited:
    """What :func:`edit_staging` did."""

    block_uid: str
    field: str
    before: Any
    after: Any
    #: False when the value was already the staged one (nothing written, nothing logged).
    changed: bool


async def edit_staging(
    conn: asyncpg.Connection,
    run_id: str,
    uid: str,
    field: str,
    value: Any,
    spec: SchemaSpec,
    reviewer: str,
) -> Edited:
    """Change one staged field of an ``ai_complete`` block, checked against the schema.

    One transaction holding the overlay row ``for update``: the whole edited overlay is
    validated (:func:`blockbatch.core.review.edited_overlay`) before anything is written, and the
    new staging and its ``review_actions`` row are written together.

    Raises:
        NotFound: the run has no block ``uid``.
        EditError: the block is not ``ai_complete``, or the edited overlay does not
            validate against ``spec``; nothing was changed.
    """
    async with conn.transaction():
        row = await conn.fetchrow(
            """select status, staging from overlays where run_id = $1 and block_uid = $2
               for update""",
            run_id,
            uid,
        )
        if row is None:
            raise NotFound(f"run {run_id} has no block {uid}; nothing was changed")
        if row["status"] != REVIEWABLE:
            raise EditError(
                f"block {uid} is {row['status']}: only a staged result "
                f"({REVIEWABLE}) can be edited; nothing was changed"
            )
        staged: dict[str, Any] = row["staging"] or {}
        overlay = edited_overlay(spec, staged, field, value)
        before = staged.get(field)
        if field in staged and before == value and type(before) is type(value):
            return Edited(uid, field, before, value, changed=False)
        # The model's own answer stays reusable by later runs (blockbatch/core/reuse.py): kept
        # before the first edit changes staging.
        await conn.execute(
            """update overlays set model_answer = coalesce(model_answer, staging),
                      staging = $3, updated_at = now()
               where run_id = $1 and block_uid = $2 and status = 'ai_complete'""",
            run_id,
            uid,
            overlay,
        )
        await conn.execute(
            """insert into review_actions (run_id, block_uid, action, reviewer, field,
                                           before, after, old_status, new_status)
               values ($1, $2, 'edit', $3, $4, $5::jsonb, $6::jsonb, 'ai_complete',
                       'ai_complete')""",
            run_id,
            uid,
            reviewer,
            field,
            before,
            value,
        )
    return Edited(uid, field, before, value, changed=True)
