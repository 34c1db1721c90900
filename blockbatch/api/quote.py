"""A quote before running (the CLI's ``estimate`` and ``run --dry-run``, ``Blockbatch.estimate``).

Parses the document and the schema as a run would, counts the input with the Messages
token-counting endpoint when a Claude endpoint is configured, reads what earlier runs of the
same schema wrote when Postgres is there, and hands the figures to :func:`blockbatch.core.quote.quote`.

It creates nothing: no document, schema or run row, no workflow, and no Claude call other
than token counting (which is free and does not touch the prompt cache) and reading the
Models API's facts of the model (kept in ``model_facts`` when Postgres is there).
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

from blockbatch.api.errors import BadRequest, parse_checked
from blockbatch.api.inputs import SchemaSource, as_schema, with_schema_model
from blockbatch.core.answer import CallShape, check_effort
from blockbatch.core.blocks import is_set_aside
from blockbatch.core.calibration import CalibrationNote
from blockbatch.core.context import RunContext
from blockbatch.core.convert.limits import check_size
from blockbatch.core.endpoint import SIMULATOR_HEADER, endpoint_host
from blockbatch.core.ingest import ConvertOptions, ParsedBlock, detect_format, document_id_for
from blockbatch.core.planning import estimate_tokens
from blockbatch.core.prompt import request_prefix
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.quote import (
    MIN_HISTORY_CALLS,
    EscalationQuote,
    OutputHistory,
    Quote,
    quote,
    quote_context,
)
from blockbatch.core.quote_tokens import PromptTokens, count_plan, counted_tokens, planner_tokens
from blockbatch.core.registry import ModelInfo, retired_model
from blockbatch.core.reuse import answer_key, block_digest, prompt_digest
from blockbatch.core.run_model import FACTS_MAX_AGE_S, check_usable, run_model
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import SchemaSpec, load_schema, schema_id_for
from blockbatch.core.views import PrefixToCount
from blockbatch.core.warm_up import WARM_UP_BLOCK, stand_in_request
from blockbatch.runtime.claude import anthropic, anthropic_client, configured_client
from blockbatch.runtime.endpoint import answering_endpoint
from blockbatch.runtime.models_api import READ_TIMEOUT_S, ModelFacts
from blockbatch.runtime.settings import Settings, load_settings
from blockbatch.send.sender import AnthropicSender, NotSent
from blockbatch.store import (
    batches,
    calibrations,
    escalations,
    model_facts,
    overlays,
    quality,
    quotes,
)
from blockbatch.store.db import connect_reading, redact_url
from blockbatch.store.reads import prefix_to_count
from blockbatch.store.repo import save_prefix_tokens, schema_definition_or_none

T = TypeVar("T")

#: Token-counting requests in flight at once.
COUNT_CONCURRENCY = 4
#: Seconds a token-counting request, or reaching Postgres for the history, may take.
COUNT_TIMEOUT_S = 60.0
DB_TIMEOUT_S = 5.0

Document = str | Path | bytes


def read_document(
    document: Document, *, name: str | None = None, fmt: str | None = None
) -> tuple[bytes, str, str]:
    """A document's bytes, name and format, from a path or from bytes (``fmt`` required).

    Raises:
        FileNotFoundError: no such file.
        BadRequest: a file that cannot be read, or bytes without a format.
        IngestError: a file larger than blockbatch reads (its size from the file system,
            before any of it is read), or an extension it does not read.
    """
    if isinstance(document, bytes):
        if fmt is None:
            raise BadRequest("a document given as bytes needs its format (fmt=...)")
        return document, name or "document", fmt
    path = Path(document)
    if not path.is_file():
        if path.exists():
            raise BadRequest(f"{path} is not a file: give a document file")
        raise FileNotFoundError(errno.ENOENT, "no such document file", str(path))
    fmt = fmt or detect_format(path.name)
    try:
        check_size(path.stat().st_size, f"{fmt} file")  # refused before it is read
        data = path.read_bytes()
    except OSError as exc:
        raise BadRequest(
            f"cannot read the document {path}: {exc.strerror or exc}; check its permissions"
        ) from None
    return data, name or path.name, fmt


async def estimate(
    document: Document,
    schema: SchemaSource,
    options: RunOptions | None = None,
    *,
    name: str | None = None,
    fmt: str | None = None,
    text_field: str = "text",
    skip_empty: bool = False,
    read_as: ConvertOptions | None = None,
    blocks: list[ParsedBlock] | None = None,
    settings: Settings | None = None,
    pool: asyncpg.Pool | None = None,
    count: bool = True,
    history: bool = True,
    client: anthropic.AsyncAnthropic | None = None,
    model: ModelInfo | None = None,
    escalate_to: str | None = None,
) -> Quote:
    """Quote a run of ``schema`` over ``document`` with ``options``, creating nothing.

    Args:
        document: a path, or the file's bytes (then ``fmt`` is required).
        schema: a schema dict, :class:`SchemaSpec`, JSON text or path.
        options: the run's options (the model left at the default takes the schema's).
        name, fmt, text_field, skip_empty, read_as: as for ingesting the document.
        blocks: the document already parsed (the CLI parses once for checks and quote).
        settings: where Claude and Postgres are (default: the environment).
        pool: a Postgres pool to read earlier runs from; without one a connection is tried
            (read only, no migration) and its absence only noted.
        count: count input tokens with the API (``False``: the planner's estimates).
        history: learn the expected output from earlier runs of the schema in the ledger.
        client: the anthropic client to count with (default: one from ``settings``).
        model: the run's model as the caller checked it (:func:`checked_model`); default:
            checked here.
        escalate_to: quote escalating the run to this model too (``Quote.escalation``:
            the second pass, each block alone on it, and the share a measurement expects).

    Raises:
        FileNotFoundError, BadRequest, IngestError, SchemaError, UnknownModelError: bad
            input; nothing was created.
        RetiredModelError: a retired model (the message names the one to move to).
    """
    settings = settings or load_settings()
    data, name, fmt = read_document(document, name=name, fmt=fmt)
    parsed = (
        blocks
        if blocks is not None
        else parse_checked(data, fmt, text_field=text_field, skip_empty=skip_empty, options=read_as)
    )
    spec = as_schema(schema)
    options = with_schema_model(options or RunOptions(), spec.prompt_config.model)
    if model is None:
        model = await checked_model(options.model, settings, pool)
    check_effort(model, options.effort)
    options = options.model_copy(update={"model": model.id})
    to: ModelInfo | None = None
    if escalate_to is not None:
        to = await checked_model(escalate_to, settings, pool)
        if to.id == model.id:
            raise BadRequest(
                f"--escalate-to {to.id} is the run's own model: escalate to a stronger one"
            )
    share: tuple[float, str] | None = None
    async with _reading(settings, pool, wanted=history) as db:
        # The schema as a run of it reads it: the stored copy when it is stored already (the
        # first upload's field order), else the author's, which storing it keeps.
        spec = await _stored(db, spec)
        ctx = quote_context(options, spec, model)
        document_id = document_id_for(fmt, data, read_as)
        notes: list[str] = list(spec.notices)
        aside = [b for b in parsed if is_set_aside(b.block_type)]
        if aside and not options.include_boilerplate:
            # A run keeps them unsent (set_aside): they are not quoted.
            cost = ctx.blocks_cost_usd([estimate_tokens(b.block_content) for b in aside])
            notes.append(
                f"{len(aside)} of {len(parsed)} blocks are set aside (page headers and "
                "footers, page numbers, off-page or invisible text, navigation): kept, not "
                f"sent, not quoted; sending them would add ~${cost:.4f} "
                "(include_boilerplate)"
            )
            parsed = [b for b in parsed if not is_set_aside(b.block_type)]
        if history and options.reuse_answers:
            # Blocks an earlier run answered under the same prompt and model get that answer
            # (incremental re-runs): they are not sent, so not quoted.
            reusable, why = await _reusable(db, parsed, spec, model.id, ctx.shape, settings)
            if why:
                notes.append(why)
            elif reusable and len(reusable) == len(parsed):
                notes.append(
                    f"all {len(parsed)} blocks have an earlier run's answer: the run "
                    "reuses them and makes no call; the figures are for --set reuse_answers=false"
                )
            elif reusable:
                notes.append(
                    f"{len(reusable)} of {len(parsed)} blocks have an earlier run's "
                    "answer and are reused, not sent: the figures are for the other "
                    f"{len(parsed) - len(reusable)}"
                )
                parsed = [b for i, b in enumerate(parsed) if i not in reusable]
        # The same content is asked once per run (plan_run): its copies take that answer.
        digests: set[str] = set()
        unique = []
        for b in parsed:
            digest = block_digest(b.block_type, b.block_content)
            if digest not in digests:
                digests.add(digest)
                unique.append(b)
        if len(unique) < len(parsed):
            notes.append(
                f"{len(parsed) - len(unique)} blocks repeat an earlier block's type and content "
                "word for word: the run asks each once and gives its copies the same answer, "
                f"so the figures are for {len(unique)} blocks"
            )
            parsed = unique
        block_tokens = [estimate_tokens(b.block_content) for b in parsed]
        tokens: PromptTokens | None = None
        if count:
            wire = [
                {
                    "block_uid": f"{document_id}:{b.block_index}",
                    "block_type": b.block_type,
                    "block_content": b.block_content,
                }
                for b in parsed
            ]
            tokens, why = await _count(ctx, wire, block_tokens, settings, client)
            if why:
                notes.append(why)
        else:
            notes.append("input not counted (--no-count): the planner's estimates")
        if tokens is None:
            tokens = planner_tokens(ctx, block_tokens, WARM_UP_BLOCK["block_content"])
        seen: OutputHistory | None = None
        calibrated: CalibrationNote | None = None
        if history:
            seen, why = await _history(db, schema_id_for(spec), model.id, options.effort)
            if why:
                notes.append(why)
            else:
                calibrated = await db.read(
                    lambda conn: calibrations.latest(conn, schema_id_for(spec), model.id)
                )
        prefix_seen = await _prefix_seen(db, ctx) if history else None
        # A schema's first quote: what other schemas' answers wrote against their estimate.
        prior = (
            await db.read(
                lambda conn: quotes.other_schemas_output(conn, schema_id_for(spec), model.id)
            )
            if history and (seen is None or seen.calls < MIN_HISTORY_CALLS)
            else None
        )
        # The model's measured batch cache hits, which the batch figures expect.
        batch_hits = (
            await db.read(lambda conn: batches.batch_cache_hits(conn, model.id))
            if history
            else None
        )
        q = quote(
            ctx,
            block_tokens,
            tokens,
            document=name,
            history=seen,
            notes=notes,
            prefix_seen=prefix_seen,
            prior=prior,
            batch_hits=batch_hits,
        )
        q = q.model_copy(update={"calibration": calibrated})
        if to is not None and history:
            share = await _escalation_share(
                db, schema_id_for(spec), model.id, to.id, q.blocks_per_pack[1]
            )
    if to is None:
        return q
    # Every block alone on the escalation model, as the escalation asks it (no probe, every
    # call made), quoted the same way; the share sent up is a measurement's, if any.
    alone = await estimate(
        data,
        spec,
        options.model_copy(
            update={
                "model": to.id,
                "pack_size": 1,
                "reuse_answers": False,
                "quality": QualityOptions(probe_rate=0.0, probe_minimum=0),
            }
        ),
        name=name,
        fmt=fmt,
        blocks=parsed,
        settings=settings,
        pool=pool,
        count=count,
        history=history,
        client=client,
        model=to,
    )
    return q.model_copy(
        update={
            "escalation": EscalationQuote(
                to=to.id,
                second_pass_usd=q.sync.cost_usd - q.sync.probe_cost_usd,
                alone_usd=alone.sync.cost_usd,
                share=share[0] if share else None,
                share_source=share[1] if share else None,
            )
        }
    )


async def _escalation_share(
    db: _Reader, schema_id: str, model: str, to: str, pack_size: int
) -> tuple[float, str] | None:
    """The share of blocks an escalation of ``schema_id`` from ``model`` to ``to`` is
    expected to send up, and where that comes from: the newest ``calibrate --escalation``
    (at the size nearest ``pack_size``, the quote's largest pack), else earlier
    escalations."""
    measured = await db.read(
        lambda conn: calibrations.escalation_share(conn, schema_id, model, to, pack_size)
    )
    if measured is not None:
        return measured[0], f"calibration {measured[1]}"
    seen = await db.read(lambda conn: escalations.share_sent_up(conn, schema_id, model, to))
    if seen is not None:
        return seen[0], f"{seen[1]} earlier escalation{'s' if seen[1] != 1 else ''}"
    return None


async def checked_model(
    name: str,
    settings: Settings,
    pool: asyncpg.Pool | None = None,
    reader: ModelFacts | None = None,
) -> ModelInfo:
    """The model a run of ``name`` would use, refused when retired, before anything else.

    The Models API's facts of it are read first (``GET /v1/models/{id}``; kept in Postgres
    for a day when ``pool`` is given) where Claude is configured; an API without the
    endpoint, or not answering, leaves the registry as it is. A model the registry does not
    price runs with the prices of ``BLOCKBATCH_MODEL_PRICES`` (``blockbatch.core.run_model``).

    Args:
        reader: the Models API reader to use (default: one of its own, closed after).

    Raises:
        RetiredModelError: retired (the registry's list or end-of-life day, or the Models
            API's ``lifecycle``); the message names the model to move to.
        UnknownModelError: neither the registry nor configuration prices it.
    """
    facts = (
        None
        if retired_model(name) is not None
        else await _model_facts(name, settings, pool, reader)
    )
    model = run_model(name, facts, settings.blockbatch_model_prices)
    check_usable(model, facts, date.today())
    return model


async def _model_facts(
    name: str, settings: Settings, pool: asyncpg.Pool | None, reader: ModelFacts | None
) -> dict[str, Any] | None:
    own = reader is None
    if reader is None:
        client = configured_client(settings, timeout_s=READ_TIMEOUT_S)
        # No credentials: only facts kept by others.
        reader = ModelFacts(client) if client is not None else None
    try:
        if pool is not None:
            async with pool.acquire() as conn:
                if reader is None:
                    return await model_facts.fresh(conn, name, FACTS_MAX_AGE_S)
                return await reader.refresh(conn, name)
        return await reader.fetch(name) if reader is not None else None
    finally:
        if own and reader is not None:
            await reader.client.close()


async def _count(
    ctx: RunContext,
    wire: list[dict[str, str]],
    block_tokens: list[int],
    settings: Settings,
    client: anthropic.AsyncAnthropic | None,
) -> tuple[PromptTokens | None, str | None]:
    """The input counted by the API, or ``None`` and why not (the caller estimates)."""
    plan = count_plan(ctx, wire, block_tokens, stand_in_request(ctx))
    own = client is None
    if client is None:
        try:
            client = anthropic_client(settings, timeout_s=COUNT_TIMEOUT_S, max_retries=2)
        except RuntimeError as exc:
            return None, f"input not counted ({exc}): the planner's estimates"
    sender = AnthropicSender(client)
    gate = asyncio.Semaphore(COUNT_CONCURRENCY)
    # Who counted: the simulator marks its answers (blockbatch/core/endpoint.py), and its
    # count is its own tokenizer's, not Claude's.
    simulated = False

    async def one(request: dict[str, Any]) -> int:
        nonlocal simulated
        async with gate:
            counted = await sender.count_tokens(request)
            simulated = simulated or SIMULATOR_HEADER in counted.headers
            return counted.input_tokens

    try:
        answers = await asyncio.gather(*(one(r) for r in plan.requests))
    except NotSent as failed:
        if failed.answered:
            return None, (
                f"input not counted (the token-counting endpoint answered "
                f"{failed.error.status}: {failed.error.message[:200]}): the planner's estimates"
            )
        where = settings.resolved_anthropic_base_url or "the Claude API"
        return None, (
            f"input not counted ({where} is not answering: {failed.ledger_type}): "
            "the planner's estimates"
        )
    finally:
        if own:
            await client.close()
    return counted_tokens(plan, answers, simulated=simulated), None


async def count_run_prefix(pool: asyncpg.Pool, settings: Settings, run_id: str) -> int | None:
    """Count a finished run's uncached prompt prefix once and keep it, for its baseline
    (``blockbatch.report.baseline_cost``, which only reads): two free token-counting
    requests, made only where the run was answered (another endpoint has another
    tokenizer) and only while nobody counted it. The counted size, else ``None``."""
    to_count = await prefix_to_count(pool, run_id)
    if to_count is None or to_count.endpoint_host != endpoint_host(
        settings.resolved_anthropic_base_url
    ):
        return None
    counted = await count_prefix(settings, to_count)
    if counted is not None:
        await save_prefix_tokens(pool, to_count.sha256, counted)
    return counted


async def count_prefix(settings: Settings, prefix: PrefixToCount) -> int | None:
    """A run's prompt prefix as the API counts it: one of its requests counted with and
    without its system prompt and tools (two free token-counting requests); ``None`` when
    the endpoint cannot say (no key, not answering, an error)."""
    client = configured_client(settings, timeout_s=COUNT_TIMEOUT_S, max_retries=2)
    if client is None:
        return None
    messages = prefix.request.get("messages")
    if not messages:
        return None
    with_prefix: dict[str, Any] = {
        "model": prefix.model,
        "messages": messages,
        "system": prefix.system,
        "tools": prefix.tools,
    }
    if prefix.request.get("tool_choice") is not None:
        with_prefix["tool_choice"] = prefix.request["tool_choice"]
    sender = AnthropicSender(client)
    async with client:
        try:
            full, bare = await asyncio.gather(
                sender.count_tokens(with_prefix),
                sender.count_tokens({"model": prefix.model, "messages": messages}),
            )
        except NotSent:
            return None
    return max(full.input_tokens - bare.input_tokens, 0)


@dataclass(frozen=True)
class _Reader:
    """The quote's one Postgres connection (``None``: not wanted, or not reachable)."""

    conn: asyncpg.Connection | None
    #: Why there is no connection when one was wanted (Postgres not reachable).
    unreachable: str | None = None

    async def read(self, read: Callable[[asyncpg.Connection], Awaitable[T]]) -> T | None:
        """``read`` on the connection; ``None`` when Postgres cannot say (no connection,
        or a database from before the tables it reads: ``_history`` notes why)."""
        if self.conn is None:
            return None
        try:
            return await read(self.conn)
        except (asyncpg.UndefinedTableError, asyncpg.UndefinedColumnError):
            return None


@asynccontextmanager
async def _reading(
    settings: Settings, pool: asyncpg.Pool | None, *, wanted: bool
) -> AsyncIterator[_Reader]:
    """One connection for every read of a quote: the caller's pool's, else one of its own
    (read only, no migration), else none and why."""
    if not wanted:
        yield _Reader(None)
    elif pool is not None:
        async with pool.acquire() as conn:
            yield _Reader(conn)
    else:
        url = settings.resolved_database_url
        try:
            conn = await connect_reading(url, timeout=DB_TIMEOUT_S)
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            why = f"Postgres at {redact_url(url)} is not reachable: {type(exc).__name__}"
            yield _Reader(None, why)
            return
        try:
            yield _Reader(conn)
        finally:
            await conn.close()


async def _stored(db: _Reader, spec: SchemaSpec) -> SchemaSpec:
    """The stored copy of ``spec`` (the same content, its fields in the order first
    stored), or ``spec`` itself when it is not stored."""
    stored = await db.read(lambda conn: schema_definition_or_none(conn, schema_id_for(spec)))
    return spec if stored is None else load_schema(stored, name=spec.name)


async def _reusable(
    db: _Reader,
    parsed: list[ParsedBlock],
    spec: SchemaSpec,
    model_id: str,
    shape: CallShape,
    settings: Settings,
) -> tuple[set[int], str | None]:
    """Positions of the blocks a run would reuse an earlier answer for, or why not known:
    only answers of the endpoint that would answer it (blockbatch/runtime/endpoint.py)."""
    if db.unreachable is not None:
        return set(), (
            f"reuse of earlier answers not checked ({db.unreachable}): every block quoted"
        )
    prompt = prompt_digest(spec, model_id, shape)
    keys = [answer_key(prompt, block_digest(b.block_type, b.block_content)) for b in parsed]
    # A database from before incremental re-runs: nothing to reuse.
    endpoint = await db.read(lambda conn: answering_endpoint(conn, settings))
    found = await db.read(lambda conn: overlays.reusable_answers(conn, keys, endpoint)) or {}
    return {i for i, key in enumerate(keys) if key in found}, None


async def _prefix_seen(db: _Reader, ctx: RunContext) -> bool | None:
    """What the API did with the run's prompt prefix on its model before, as ``plan_run``
    reads it (store.quality.prefix_cache_seen)."""
    sha = request_prefix(stand_in_request(ctx))[0]
    return await db.read(lambda conn: quality.prefix_cache_seen(conn, sha, ctx.model.id))


async def _history(
    db: _Reader, schema_id: str, model: str, effort: str | None = None
) -> tuple[OutputHistory | None, str | None]:
    """Earlier runs' output against the planner's estimate, or ``None`` and why not."""
    if db.unreachable is not None:
        return None, f"no earlier runs read ({db.unreachable}): the planner's output estimate"
    if db.conn is None:
        return None, None
    try:
        return await quotes.output_history(db.conn, schema_id, model, effort), None
    except (asyncpg.UndefinedTableError, asyncpg.UndefinedColumnError):
        return None, (
            "no earlier runs read (the database has no ledger yet, or an old one): "
            "the planner's output estimate"
        )
