"""Read models of runs, overlays and the ledger, straight from Postgres (the source of truth).

The front doors (the API, the CLI, the run report) ask for what they show by name here;
every statement they need lives in this module or in :mod:`blockbatch.store.repo` (writes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel, Field

from blockbatch.core.budget import left_to_do
from blockbatch.core.models import BudgetLeft, RunResult
from blockbatch.core.reasons import REASONS
from blockbatch.core.registry import TokenCounts, known_model_names
from blockbatch.core.review import ANSWERED, OVERLAY_STATUSES
from blockbatch.store.repo import NotFound
from blockbatch.store.runs import ACTIVE_STATUSES

#: A run in one of these has not finished yet (a cancelling run still winds down).
UNFINISHED = (*ACTIVE_STATUSES, "cancelling")


class RunInfo(TokenCounts):
    """One run as stored: what was asked, where it stands, what it cost."""

    run_id: str
    status: str
    error: str | None
    document_id: str
    document_name: str
    schema_id: str
    schema_name: str
    model: str
    settings: dict[str, Any]
    workflow_id: str | None
    #: Live overlay counts by status (pending, ai_complete, failed, cancelled, confirmed,
    #: rejected).
    blocks: dict[str, int]
    blocks_total: int
    pack_count: int
    calls: int
    split_events: int
    cost_usd: float
    #: Blocks answered at planning by an earlier run's answer, and what that saved.
    blocks_reused: int = 0
    reuse_saved_usd: float = 0.0
    #: Who answered the run's calls (blockbatch/core/endpoint.py ``Endpoint.label``: ``anthropic``,
    #: ``simulator 127.0.0.1:8765``), from its ledger.
    endpoints: list[str] = Field(default_factory=list)
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    #: A run stopped by its budget: the cost of its calls that answered blocks (``work``),
    #: of its first warm-up (``warm_up``) and its largest reservation (``largest_call``),
    #: for what finishing would cost.
    budget_costs: dict[str, float] | None = None

    @property
    def simulated(self) -> bool:
        """Whether the simulator answered any of the run's calls."""
        return any(e.split(" ", 1)[0] == "simulator" for e in self.endpoints)

    @property
    def active(self) -> bool:
        """Whether the run may still change (created, planning, running or cancelling)."""
        return self.status in UNFINISHED

    @property
    def duration_s(self) -> float | None:
        """Seconds from creation to the end; None while the run has not finished."""
        if self.finished_at is None:
            return None
        return (self.finished_at - self.created_at).total_seconds()

    def result(self) -> RunResult:
        """The run's counters as a :class:`RunResult` (final once the run has finished)."""
        b = self.blocks
        done = sum(b.get(s, 0) for s in ANSWERED)
        return RunResult.model_validate(
            {
                **self.model_dump(include=set(RunResult.model_fields)),
                "blocks_ai_complete": done,
                "blocks_failed": b.get("failed", 0),
                "blocks_cancelled": b.get("cancelled", 0),
                "budget": self.budget_left(done),
                "priced_from_configuration": self.model not in known_model_names(),
            }
        )

    @property
    def max_cost_usd(self) -> float | None:
        """The run's budget (``None``: none)."""
        value = self.settings.get("max_cost_usd")
        return float(value) if value is not None else None

    def budget_left(self, done: int | None = None) -> BudgetLeft | None:
        """What a run stopped by its budget has left to do (``None`` for any other run)."""
        if self.status != "budget_exhausted":
            return None
        if done is None:
            done = sum(self.blocks.get(s, 0) for s in ANSWERED)
        costs = self.budget_costs or {}
        return left_to_do(
            self.max_cost_usd or 0.0,
            spent=self.cost_usd,
            blocks_done=done,
            blocks_left=self.blocks_total - done,
            work_spent=costs.get("work"),
            restart_usd=costs.get("warm_up", 0.0),
            largest_call_usd=costs.get("largest_call", 0.0),
            reused=self.blocks_reused,
        )


#: Who answered a run's calls (``blockbatch.core.endpoint.Endpoint.label``), in order.
_ENDPOINTS_SQL = """select distinct c.provider || coalesce(' ' || c.endpoint_host, '')
             from llm_calls c where c.run_id = {run} and c.status = 'succeeded'
             order by 1"""


async def run_endpoints(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> list[str]:
    """Who answered the run's calls: ``anthropic``, ``simulator 127.0.0.1:8765``, ..."""
    return list(await conn.fetchval(f"select array({_ENDPOINTS_SQL.format(run='$1')})", run_id))


_RUN_SQL = (
    """
select r.run_id, r.status, r.error, r.document_id, d.name as document_name, r.schema_id,
       s.name as schema_name, r.model, r.settings, r.workflow_id, r.blocks_total, r.pack_count,
       r.calls, r.split_events, r.input_tokens, r.output_tokens, r.thinking_tokens,
       r.cache_creation_input_tokens, r.cache_read_input_tokens, r.cost_usd::float8 as cost_usd,
       r.blocks_reused, r.reuse_saved_usd::float8 as reuse_saved_usd, r.created_at, r.started_at, r.finished_at, r.cancel_requested_at,
       case when r.status = 'budget_exhausted' then (
           select jsonb_build_object('work', coalesce(sum(cost_usd) filter (
                      where purpose in ('pack', 'batch_request')), 0),
                  'warm_up', coalesce((select w.cost_usd from llm_calls w
                      where w.run_id = r.run_id and w.purpose = 'warm_up'
                        and w.status = 'succeeded' order by w.call_id limit 1), 0),
                  'largest_call', coalesce(max(reserved_usd), 0))
           from llm_calls c where c.run_id = r.run_id) end as budget_costs,
       coalesce((select jsonb_object_agg(status, n) from (
           select status, count(*) as n from overlays o where o.run_id = r.run_id
           group by status) c), '{}') as blocks,
       array("""
    + _ENDPOINTS_SQL.format(run="r.run_id")
    + """) as endpoints
from runs r join documents d using (document_id) join schemas s using (schema_id)
"""
)


def _run(row: asyncpg.Record) -> RunInfo:
    data = dict(row)
    data["blocks"] = {k: data["blocks"].get(k, 0) for k in OVERLAY_STATUSES}
    data["blocks_total"] = data["blocks_total"] or sum(data["blocks"].values())
    return RunInfo.model_validate(data)


async def get_run(conn: asyncpg.Connection | asyncpg.Pool, run_id: str) -> RunInfo:
    """One run with its live overlay counts.

    Raises:
        NotFound: no run has this id.
    """
    row = await conn.fetchrow(_RUN_SQL + " where r.run_id = $1", run_id)
    if row is None:
        raise NotFound(f"no run {run_id!r}: list runs with `python starter.py list`")
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


def schema_fields(definition: Mapping[str, Any]) -> list[str]:
    """A stored schema's fields in their declared order (jsonb does not keep key order)."""
    return list(dict.fromkeys([*definition.get("required", []), *definition["properties"]]))


class ReviewItem(BaseModel):
    """A block and its overlay in one run."""

    block_uid: str
    block_index: int
    block_type: str
    block_content: str
    metadata: dict[str, Any]
    status: str
    staging: dict[str, Any] | None
    confirmed: dict[str, Any] | None
    attempt_count: int
    last_error: str | None
    #: Why a failed or cancelled block is not done (blockbatch/core/reasons.py); ``None`` otherwise.
    reason_code: str | None = None
    pack_path: str | None
    #: Set when the overlay reused an earlier run's answer: that run.
    reused_from_run_id: str | None = None


class ReviewPage(BaseModel):
    """One page of a run's blocks next to their overlays."""

    run_id: str
    offset: int
    total: int
    #: The schema's fields in their declared order (jsonb does not keep key order).
    fields: list[str]
    items: list[ReviewItem]


async def review_page(
    pool: asyncpg.Pool,
    run_id: str,
    *,
    offset: int = 0,
    limit: int = 20,
    statuses: list[str] | None = None,
    block_uids: list[str] | None = None,
    reasons: list[str] | None = None,
) -> ReviewPage:
    """Blocks of a run next to their overlays, in block order, filtered and paged.

    ``reasons``: only blocks whose ``reason_code`` is one of these.

    Raises:
        ValueError: a reason that is not a code of blockbatch/core/reasons.py.
    """
    unknown = [r for r in reasons or () if r not in REASONS]
    if unknown:
        raise ValueError(
            f"unknown reason code {', '.join(unknown)}; the codes are: " + ", ".join(REASONS)
        )
    run = await get_run(pool, run_id)
    definition = await pool.fetchval(
        "select definition from schemas where schema_id = $1", run.schema_id
    )
    fields = schema_fields(definition)
    where = """o.run_id = $1 and ($2::text[] is null or o.status = any($2::text[]))
               and ($3::text[] is null or o.block_uid = any($3::text[]))
               and ($4::text[] is null or o.reason_code = any($4::text[]))"""
    total = await pool.fetchval(
        f"select count(*) from overlays o where {where}",
        run_id,
        statuses,
        block_uids,
        reasons or None,
    )
    rows = await pool.fetch(
        f"""select o.block_uid, o.block_index, b.block_type, b.block_content, b.metadata,
                   o.status, o.staging, o.confirmed, o.attempt_count, o.last_error,
                   o.reason_code, o.pack_path, o.reused_from_run_id
            from overlays o join blocks b using (block_uid)
            where {where} order by o.block_index offset $5 limit $6""",
        run_id,
        statuses,
        block_uids,
        reasons or None,
        offset,
        limit,
    )
    return ReviewPage(
        run_id=run_id,
        offset=offset,
        total=total,
        fields=fields,
        items=[ReviewItem.model_validate(dict(r)) for r in rows],
    )


class CallRow(TokenCounts):
    """One ledger row: a request sent to Claude and what came back."""

    call_id: int
    pack_path: str
    pack_attempt: int
    blocks: int
    #: What the row was for: ``pack`` (a sync pack call), ``batch_request``, ...
    purpose: str
    #: Who answered: ``anthropic`` (the Claude API) or ``simulator``.
    provider: str
    #: The base URL's host when it is not Anthropic's own API.
    endpoint_host: str | None = None
    #: ``messages`` or ``message_batches``.
    api: str | None
    status: str
    stop_reason: str | None
    http_status: int | None
    error_type: str | None
    error_message: str | None
    cost_usd: float
    latency_ms: int | None
    workflow_id: str | None
    workflow_run_id: str | None
    activity_id: str | None
    activity_attempt: int | None
    started_at: datetime


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


#: How many characters of an elided system prompt or tool definition are shown.
ELIDE_AT = 200


class PromptPart(BaseModel):
    """The system prompt or the tool definitions of a call, elided unless asked in full."""

    #: Characters of ``text`` in full, and the sha256 of its UTF-8 bytes.
    length: int
    sha256: str
    elided: bool
    #: The text (system: its text blocks joined; tools: JSON), cut at ``ELIDE_AT`` when elided.
    text: str
    #: The stored JSON as sent (only in full).
    value: Any = None

    @classmethod
    def of(cls, value: Any, *, full: bool, as_text: bool) -> PromptPart | None:
        if value is None:
            return None
        if isinstance(value, str):
            text = value
        elif (
            as_text
            and isinstance(value, list)
            and all(isinstance(b, dict) and isinstance(b.get("text"), str) for b in value)
        ):
            text = "\n\n".join(b["text"] for b in value)
        else:
            text = json.dumps(value, ensure_ascii=False, indent=2)
        digest = hashlib.sha256(text.encode()).hexdigest()
        elided = not full and len(text) > ELIDE_AT
        return cls(
            length=len(text),
            sha256=digest,
            elided=elided,
            text=text[:ELIDE_AT] + "…" if elided else text,
            value=value if full else None,
        )


class CallDetail(CallRow):
    """One ledger row in full: the request as sent (system and tools joined from
    ``prompt_prefixes``), and the raw response or the error. Never the API key: request
    headers are not stored."""

    run_id: str
    model: str
    block_uids: list[str]
    #: The short ids the request named its blocks by (alias -> block_uid), as recorded
    #: before it was sent; ``None`` when it named them by block_uid.
    block_aliases: dict[str, str] | None = None
    request_id: str | None
    cache_creation_1h_tokens: int
    finished_at: datetime | None
    provider_batch_id: str | None
    custom_id: str | None
    prefix_sha256: str | None
    #: The request without system and tools, as stored.
    request: dict[str, Any]
    system: PromptPart | None
    tools: PromptPart | None
    #: The raw answer (a Messages response, or a batch result line's content).
    response: Any
    apply_outcome: Any

    @property
    def named_blocks(self) -> list[str]:
        """The blocks as a person reads them: ``b1 = doc:0`` for a block sent under a short
        id (the answer's ids map back through this record), else the block_uid."""
        if not self.block_aliases:
            return list(self.block_uids)
        by_uid = {uid: alias for alias, uid in self.block_aliases.items()}
        return [f"{by_uid[u]} = {u}" if u in by_uid else u for u in self.block_uids]


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
            f"no call {call_id} in run {run_id!r}: list its calls with "
            f"`python starter.py calls {run_id}`"
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
select b.block_uid, b.block_index, b.block_type, b.block_content, b.metadata,
       o.status, o.staging, o.confirmed, o.last_error, o.reason_code,
       o.reused_from_run_id, o.reused_from_call_id,
       (select jsonb_agg(jsonb_build_object(
                   'action', a.action, 'reviewer', a.reviewer, 'at', a.at, 'field', a.field,
                   'before', a.before, 'after', a.after, 'old_status', a.old_status,
                   'new_status', a.new_status) order by a.id)
        from review_actions a where a.run_id = $1 and a.block_uid = b.block_uid) as review
from blocks b left join overlays o on o.block_uid = b.block_uid and o.run_id = $1
where b.document_id = $2 order by b.block_index
"""

#: One block of an export: block_uid, block_index, block_type, block_content, metadata,
#: and its overlay's status, staging, confirmed, last_error, reason_code,
#: reused_from_run_id and reused_from_call_id (set when the overlay reused an earlier run's
#: answer; all None without an overlay), and ``review``: its review actions in order (edit / confirm / reject: who,
#: when, field, before, after), None when nobody reviewed it.
ExportRow = Mapping[str, Any]


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

    async def document(self) -> dict[str, Any]:
        """The document row: document_id, name, format, content_sha256, block_count."""
        doc = await self.conn.fetchrow(
            "select document_id, name, format, content_sha256, block_count from documents "
            "where document_id = $1",
            self.run.document_id,
        )
        return dict(doc)


@asynccontextmanager
async def export_snapshot(pool: asyncpg.Pool, run_id: str) -> AsyncIterator[ExportSnapshot]:
    """A consistent snapshot of one run for an export.

    Raises:
        NotFound: no run has this id.
    """
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        yield ExportSnapshot(conn, await get_run(conn, run_id))


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


class PrefixToCount(BaseModel):
    """A run's prompt prefix and one of its requests, for the token-counting endpoint:
    the request counted with and without its system prompt and tools differs by the
    prefix (``blockbatch.api.quote.count_prefix``)."""

    sha256: str
    model: str
    system: Any
    tools: Any
    #: The stored request (without system and tools): its messages and tool_choice.
    request: dict[str, Any]
    #: Where the call went (its ``endpoint_host``; ``None``: Anthropic's own API): a count
    #: elsewhere would use another tokenizer.
    endpoint_host: str | None = None


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


class ItemUsage(BaseModel):
    """One block's share of its run's calls (``llm_batch``'s per-item usage).

    Each call's tokens and cost are split over the blocks it was sent with, by their
    estimated tokens; a call sent without blocks (the warm-up, a probe) over all the run's
    blocks the same way. So the shares of a run's blocks add up to the run's usage (tokens
    rounded per block). A reused answer's block has nothing of this run's calls.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cost_usd: float = 0.0
    #: How many of the run's pack calls the block was sent in (more than one after a
    #: split or a retry).
    calls: int = 0


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
            cost_usd=round(r["cost_usd"], 8),
            calls=r["calls"],
        )
        for r in rows
    }
