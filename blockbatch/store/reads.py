"""Read models of runs, overlays and the ledger, straight from Postgres (the source of truth).

The front doors (the API, the CLI, the run report) ask for what they show by name here;
every statement they need lives in this module or in :mod:`blockbatch.store.repo` (writes).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg

from blockbatch.core.commands import PROG
from blockbatch.core.review import OVERLAY_STATUSES
from blockbatch.core.schema import schema_fields
from blockbatch.core.views import (
    CallDetail,
    CallRow,
    ExportRow,
    ItemUsage,
    PrefixToCount,
    PromptPart,
    RunInfo,
)
from blockbatch.store.repo import NotFound
from blockbatch.store.runs import BUDGET_COSTS_SQL

#: Who gave a run's answers (``blockbatch.core.endpoint.Endpoint.label``), in order: the
#: endpoints of its own calls and those its reused answers came from (migration 031).
_ENDPOINTS_SQL = """select distinct e from (
                 select c.provider || coalesce(' ' || c.endpoint_host, '') as e
                 from llm_calls c where c.run_id = {run} and c.status = 'succeeded'
                 union all
                 select unnest(x.reused_endpoints) from runs x where x.run_id = {run}) t
             order by 1"""


async def run_endpoints(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> list[str]:
    """Who gave the run's answers, its reused ones included: ``anthropic``,
    ``simulator 127.0.0.1:8765``, ..."""
    return list(await conn.fetchval(f"select array({_ENDPOINTS_SQL.format(run='$1')})", run_id))


_RUN_SQL = (
    """
select r.run_id, r.status, r.error, r.document_id, d.name as document_name, r.schema_id,
       s.name as schema_name, r.model, r.settings, r.workflow_id, r.blocks_total, r.pack_count,
       r.calls, r.split_events, r.input_tokens, r.output_tokens, r.thinking_tokens,
       r.cache_creation_input_tokens, r.cache_read_input_tokens, r.cost_usd::float8 as cost_usd,
       r.blocks_reused, r.reuse_saved_usd::float8 as reuse_saved_usd,
       r.blocks_set_aside, r.set_aside_usd::float8 as set_aside_usd, r.created_at, r.started_at, r.finished_at, r.cancel_requested_at,
       case when r.status = 'budget_exhausted' then (select to_jsonb(b) from ("""
    + BUDGET_COSTS_SQL.format(run="r.run_id")
    + """) b) end as budget_costs,
       coalesce((select k.counts from run_block_counts k where k.run_id = r.run_id),
                '{}') as blocks,
       array("""
    + _ENDPOINTS_SQL.format(run="r.run_id")
    + """) as endpoints
from runs r join documents d using (document_id) join schemas s using (schema_id)
"""
)


def _run(row: asyncpg.Record) -> RunInfo:
    data = dict(row)
    data["blocks"] = {k: data["blocks"].get(k, 0) for k in OVERLAY_STATUSES}
    data["blocks_total"] = data["blocks_total"] or sum(
        n for status, n in data["blocks"].items() if status != "set_aside"
    )
    return RunInfo.model_validate(data)


async def get_run(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> RunInfo:
    """One run with its live overlay counts (kept as its overlays change, migration 034:
    one row read, whatever the run's size).

    Raises:
        NotFound: no run has this id.
    """
    row = await conn.fetchrow(_RUN_SQL + " where r.run_id = $1", run_id)
    if row is None:
        raise NotFound(f"no run {run_id!r}: list runs with `{PROG} list`")
    return _run(row)


async def list_runs(
    pool: asyncpg.Pool, *, limit: int = 20, status: str | None = None
) -> list[RunInfo]:
    """The newest ``limit`` runs, optionally only those in ``status``."""
    rows = await pool.fetch(
        _RUN_SQL + " where $2::text is null or r.status = $2"
        " order by r.created_at desc, r.run_id desc limit $1",
        limit,
        status,
    )
    return [_run(r) for r in rows]


async def list_calls(
    pool: asyncpg.Pool,
    run_id: str,
    *,
    offset: int = 0,
    limit: int = 100,
    pack: str | None = None,
) -> tuple[int, list[CallRow]]:
    """(total, page) of a run's ledger in call order; ``pack`` keeps a pack and its halves."""
    await get_run(pool, run_id)
    where = "run_id = $1 and ($2::text is null or pack_path = $2 or pack_path like $2 || '.%')"
    total = await pool.fetchval(f"select count(*) from llm_calls where {where}", run_id, pack)
    rows = await pool.fetch(
        f"""select call_id, pack_path, pack_attempt, cardinality(block_uids) as blocks,
                   purpose, provider, endpoint_host, api, status, stop_reason, http_status, error_type, error_message, input_tokens,
                   output_tokens, cache_creation_input_tokens, cache_read_input_tokens,
                   thinking_tokens, cost_usd::float8 as cost_usd, latency_ms, workflow_id, workflow_run_id,
                   activity_id, activity_attempt, started_at
            from llm_calls where {where} order by call_id offset $3 limit $4""",
        run_id,
        pack,
        offset,
        limit,
    )
    return total, [CallRow.model_validate(dict(r)) for r in rows]


async def get_call(
    pool: asyncpg.Pool, run_id: str, call_id: int, *, full: bool = False
) -> CallDetail:
    """One ledger row of a run in full; system prompt and tools elided unless ``full``.

    Raises:
        NotFound: no such run, or no such call in this run.
    """
    await get_run(pool, run_id)
    row = await pool.fetchrow(
        """select c.call_id, c.run_id, c.pack_path, c.pack_attempt,
                  cardinality(c.block_uids) as blocks, c.block_uids, c.block_aliases,
                  c.purpose, c.provider, c.endpoint_host,
                  c.api, c.status, c.model, c.stop_reason, c.http_status, c.error_type,
                  c.error_message, c.request_id, c.input_tokens, c.output_tokens,
                  c.cache_creation_input_tokens, c.cache_read_input_tokens,
                  c.cache_creation_1h_tokens, c.thinking_tokens, c.cost_usd::float8 as cost_usd,
                  c.latency_ms,
                  c.workflow_id, c.workflow_run_id, c.activity_id, c.activity_attempt,
                  c.started_at, c.finished_at, c.provider_batch_id, c.custom_id,
                  c.prefix_sha256, c.request, c.response, c.apply_outcome,
                  p.system as prefix_system, p.tools as prefix_tools
           from llm_calls c left join prompt_prefixes p on p.sha256 = c.prefix_sha256
           where c.run_id = $1 and c.call_id = $2""",
        run_id,
        call_id,
    )
    if row is None:
        raise NotFound(
            f"no call {call_id} in run {run_id!r}: list its calls with `{PROG} calls {run_id}`"
        )
    data = dict(row)
    system, tools = data.pop("prefix_system"), data.pop("prefix_tools")
    return CallDetail(
        **{**data, "block_uids": list(data["block_uids"])},
        system=PromptPart.of(system, full=full, as_text=True),
        tools=PromptPart.of(tools, full=full, as_text=False),
    )


# ---------------------------------------------------------------------- export

_EXPORT_SQL = """
select b.block_uid, b.block_index, b.block_type, b.block_content, b.metadata, b.provenance,
       o.status, o.staging, o.confirmed, o.last_error, o.reason_code,
       o.reused_from_run_id, o.reused_from_call_id, o.evidence, o.model_answer,
       (select jsonb_agg(jsonb_build_object(
                   'action', a.action, 'reviewer', a.reviewer, 'at', a.at, 'field', a.field,
                   'before', a.before, 'after', a.after, 'old_status', a.old_status,
                   'new_status', a.new_status) order by a.id)
        from review_actions a where a.run_id = $1 and a.block_uid = b.block_uid) as review
from blocks b left join overlays o on o.block_uid = b.block_uid and o.run_id = $1
where b.document_id = $2 order by b.block_index
"""


@dataclass(frozen=True)
class ExportSnapshot:
    """A run read inside one repeatable-read, read-only transaction."""

    conn: asyncpg.Connection
    run: RunInfo

    async def rows(self, prefetch: int = 500) -> AsyncIterator[ExportRow]:
        """Every block of the run's document in block order, with the run's overlay."""
        async for row in self.conn.cursor(
            _EXPORT_SQL, self.run.run_id, self.run.document_id, prefetch=prefetch
        ):
            yield row

    async def fields(self) -> list[str]:
        """The run schema's fields in their declared order."""
        definition = await self.conn.fetchval(
            "select definition from schemas where schema_id = $1", self.run.schema_id
        )
        return schema_fields(definition)

    async def field_schemas(self) -> dict[str, Any]:
        """The run schema's fields, each with its JSON Schema (typed export columns)."""
        definition = await self.conn.fetchval(
            "select definition from schemas where schema_id = $1", self.run.schema_id
        )
        return {name: definition["properties"][name] for name in schema_fields(definition)}

    async def asks_evidence(self) -> bool:
        """Whether the run's schema asks for evidence (its exports carry spans)."""
        return bool(
            await self.conn.fetchval(
                "select coalesce((definition->'prompt_config'->>'evidence')::bool, false) "
                "from schemas where schema_id = $1",
                self.run.schema_id,
            )
        )

    async def metadata_keys(self) -> list[str]:
        """Every key of the document's block metadata (a CSV's other columns, a JSONL
        record's other keys, ``source_line`` ...), each once, sorted."""
        rows = await self.conn.fetch(
            """select distinct k.key from blocks b
                 cross join lateral jsonb_object_keys(b.metadata) as k(key)
               where b.document_id = $1 and jsonb_typeof(b.metadata) = 'object'
               order by k.key""",
            self.run.document_id,
        )
        return [r["key"] for r in rows]

    async def record_columns(self) -> tuple[list[str], str] | None:
        """The input's own columns in file order and the one that held the text, or
        ``None`` when the document has no columns or was stored without them."""
        return await document_columns(self.conn, self.run.document_id)

    async def document(self) -> dict[str, Any]:
        """The document row: document_id, name, format, content_sha256, block_count."""
        doc = await self.conn.fetchrow(
            "select document_id, name, format, content_sha256, block_count from documents "
            "where document_id = $1",
            self.run.document_id,
        )
        return dict(doc)


async def document_columns(
    conn: asyncpg.Connection | asyncpg.Pool, document_id: str
) -> tuple[list[str], str] | None:
    """A document's own columns in file order and the one that held the text (a CSV,
    JSONL or XLSX input; migration 030), or ``None`` when it has none or was stored
    without them."""
    row = await conn.fetchrow(
        "select record_columns, text_column from documents where document_id = $1", document_id
    )
    if row is None or row["record_columns"] is None:
        return None
    return list(row["record_columns"]), row["text_column"]


@asynccontextmanager
async def export_snapshot(pool: asyncpg.Pool, run_id: str) -> AsyncIterator[ExportSnapshot]:
    """A consistent snapshot of one run for an export.

    Raises:
        NotFound: no run has this id.
    """
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        yield ExportSnapshot(conn, await get_run(conn, run_id))


# ---------------------------------------------------------------------- a block's page


@dataclass(frozen=True)
class BlockSource:
    """What drawing a block on its page takes: where the block is, and the file it is in."""

    format: str
    provenance: dict[str, Any] | None
    #: The document's stored file (``document_files``); ``None`` when it is not kept.
    file: bytes | None


async def block_source(pool: asyncpg.Pool, run_id: str, block_uid: str) -> BlockSource:
    """A block of a run's document, its provenance and the document's stored file.

    Raises:
        NotFound: no run has this id, or its document has no such block.
    """
    row = await pool.fetchrow(
        """select d.format, b.block_uid, b.provenance, f.bytes
           from runs r join documents d using (document_id)
             left join blocks b on b.document_id = r.document_id and b.block_uid = $2
             left join document_files f on f.document_id = r.document_id
           where r.run_id = $1""",
        run_id,
        block_uid,
    )
    if row is None:
        raise NotFound(f"no run {run_id!r}: list runs with `{PROG} list`")
    if row["block_uid"] is None:
        raise NotFound(f"run {run_id} has no block {block_uid!r}")
    return BlockSource(format=row["format"], provenance=row["provenance"], file=row["bytes"])


# ---------------------------------------------------------------------- baseline cost


@dataclass(frozen=True)
class BaselineInputs:
    """What a run's succeeded calls used, to price the same blocks at one call per block."""

    model: str
    calls: int
    #: Input, cache write and cache read tokens of all succeeded calls.
    prompt_tokens: int
    output_tokens: int
    #: Blocks sent in succeeded calls (a block sent twice counts twice).
    blocks_sent: int
    #: The prompt prefix every call carries (system prompt and tools, as the API counts
    #: them), cached or not: the prefix's counted size (``prompt_prefixes.input_tokens``),
    #: else a cached call's cache write + read; ``None`` until one of them is known (an
    #: uncached prefix not counted yet: :func:`prefix_to_count`).
    prefix_tokens: int | None
    #: Blocks that got an answer or failed trying (ai_complete, confirmed, failed).
    blocks_answered: int


async def baseline_inputs(pool: asyncpg.Pool, run_id: str) -> BaselineInputs | None:
    """The figures :func:`blockbatch.report.baseline_cost` needs; None without a succeeded call.

    The baseline sends every block alone with the whole prefix, so the prefix's size comes
    from the request, not from what was cached: a prefix below the model's cache minimum
    is in every call's input, and its cache write + read are 0.
    """
    row = await pool.fetchrow(
        """select r.model, r.blocks_total,
                  sum(c.input_tokens + c.cache_creation_input_tokens
                      + c.cache_read_input_tokens) as prompt_tokens,
                  sum(c.output_tokens) as output_tokens,
                  sum(cardinality(c.block_uids)) as blocks_sent,
                  count(*) as calls
           from runs r join llm_calls c using (run_id)
           where r.run_id = $1 and c.status = 'succeeded'
           group by r.model, r.blocks_total""",
        run_id,
    )
    if row is None or not row["calls"]:
        return None
    # Every call of a run carries the same prefix; a cached call's write + read is all of it.
    prefix = await pool.fetchval(
        """select coalesce(max(p.input_tokens),
                           nullif(max(c.cache_creation_input_tokens
                                      + c.cache_read_input_tokens), 0))
           from llm_calls c left join prompt_prefixes p on p.sha256 = c.prefix_sha256
           where c.run_id = $1 and c.status = 'succeeded' and c.prefix_sha256 is not null""",
        run_id,
    )
    # Blocks that got an answer or failed trying; a cancelled block cost nothing either way.
    answered = await pool.fetchval(
        """select count(*) from overlays where run_id = $1
           and status in ('ai_complete', 'confirmed', 'rejected', 'failed')""",
        run_id,
    )
    return BaselineInputs(
        model=row["model"],
        calls=row["calls"],
        prompt_tokens=row["prompt_tokens"],
        output_tokens=row["output_tokens"],
        blocks_sent=row["blocks_sent"],
        prefix_tokens=prefix,
        blocks_answered=answered,
    )


async def prefix_to_count(pool: asyncpg.Pool, run_id: str) -> PrefixToCount | None:
    """The prefix of the run's first answered call whose size is not known yet (``None``:
    known, or no such call)."""
    row = await pool.fetchrow(
        """select p.sha256, c.model, p.system, p.tools, c.request, c.endpoint_host
           from llm_calls c join prompt_prefixes p on p.sha256 = c.prefix_sha256
           where c.run_id = $1 and c.status = 'succeeded' and p.input_tokens is null
           order by c.call_id limit 1""",
        run_id,
    )
    return PrefixToCount.model_validate(dict(row)) if row is not None else None


async def blocks_paid_twice(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> int:
    """Blocks of the run sent again in a call answered after the call whose answer they
    took (``overlays.call_id``): 0 when no block's answer was paid for twice. The quality
    probe's calls (purpose ``quality_probe``) ask sampled blocks again on purpose, for a
    second answer that never replaces the first: they are not counted. Nor are the blocks
    the quality gate re-asked (store.overlays.reask_for_gate, recorded in plan_changes and
    overlay_changes as ai_complete -> pending): their answer is the re-ask's, and the call
    that answered them before came earlier; a block paid again after its re-ask's answer
    still counts."""
    return int(
        await conn.fetchval(
            """select count(distinct o.block_uid)
           from overlays o
           join llm_calls a on a.call_id = o.call_id
           join llm_calls c on c.run_id = o.run_id and c.call_id <> a.call_id
                and c.status = 'succeeded' and o.block_uid = any(c.block_uids)
                and c.started_at >= a.finished_at and c.purpose <> 'quality_probe'
           where o.run_id = $1 and o.status in ('ai_complete', 'confirmed', 'rejected')""",
            run_id,
        )
    )


async def item_usage(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> dict[str, ItemUsage]:
    """block_uid -> its :class:`ItemUsage` in the run (blocks that shared no call: absent)."""
    rows = await conn.fetch(
        """with run_blocks as (
               select o.block_uid, greatest(b.est_tokens, 1)::float8 as weight
               from overlays o join blocks b using (block_uid) where o.run_id = $1
           ), members as (
               select c.call_id, u.block_uid, true as sent
               from llm_calls c cross join lateral unnest(c.block_uids) as u (block_uid)
               where c.run_id = $1
               union all
               select c.call_id, rb.block_uid, false
               from llm_calls c cross join run_blocks rb
               where c.run_id = $1 and cardinality(c.block_uids) = 0
           ), shares as (
               select m.call_id, m.block_uid, m.sent,
                      rb.weight / sum(rb.weight) over (partition by m.call_id) as share
               from members m join run_blocks rb using (block_uid)
           )
           select s.block_uid,
                  round(sum(s.share * c.input_tokens))::bigint as input_tokens,
                  round(sum(s.share * c.output_tokens))::bigint as output_tokens,
                  round(sum(s.share * c.cache_creation_input_tokens))::bigint as cache_write,
                  round(sum(s.share * c.cache_read_input_tokens))::bigint as cache_read,
                  round(sum(s.share * c.thinking_tokens))::bigint as thinking_tokens,
                  sum(s.share * c.cost_usd::float8) as cost_usd,
                  count(*) filter (where s.sent) as calls
           from shares s join llm_calls c using (call_id)
           group by s.block_uid""",
        run_id,
    )
    return {
        r["block_uid"]: ItemUsage(
            input_tokens=r["input_tokens"],
            output_tokens=r["output_tokens"],
            cache_creation_input_tokens=r["cache_write"],
            cache_read_input_tokens=r["cache_read"],
            thinking_tokens=r["thinking_tokens"],
            cost_usd=round(r["cost_usd"], 8),
            calls=r["calls"],
        )
        for r in rows
    }
