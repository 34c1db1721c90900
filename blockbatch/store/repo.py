"""Thin repository: documents, schemas and runs in, typed rows out.

Used by the API (ingest, create and delete a run); reads for the front doors live in
:mod:`blockbatch.store.reads`.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import itertools
import json
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from blockbatch.core.ingest import ConvertOptions, ParsedBlock, document_id_for
from blockbatch.core.planning import estimate_tokens
from blockbatch.core.registry import RetiredModelError, UnknownModelError, get_model
from blockbatch.core.reuse import block_digest
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import SchemaSpec, schema_id_for
from blockbatch.store.db import JsonText


class NotFound(LookupError):
    """An id that is not in the database; the message says which and what to do."""


#: Formats whose source file is kept (``document_files``): the review app draws a block's
#: box on its page, which takes the file itself.
PAGED_FORMATS = frozenset({"pdf"})
#: The largest source file kept. A PDF larger than this still ingests (the converter allows
#: up to blockbatch/core/convert/limits.py ``MAX_FILE_BYTES``); its blocks show no page.
MAX_STORED_FILE_BYTES = 64 * 1024 * 1024
#: Blocks stored per statement: the statement's rows (and the memory they take on either
#: side) stay this size whatever the document's; the batches share one transaction.
INSERT_BATCH_BLOCKS = 5_000


async def save_document(
    conn: asyncpg.Connection,
    name: str,
    fmt: str,
    raw: bytes,
    blocks: Iterable[ParsedBlock],
    read_as: ConvertOptions | None = None,
    *,
    columns: list[str] | Callable[[], list[str] | None] | None = None,
    text_column: str | None = None,
) -> str:
    """Store a parsed document once (same bytes + format + ``read_as`` -> same id) and
    return its id. ``read_as``: the options the blocks were parsed with (another reading
    of the same bytes is another document).

    ``blocks`` may be a list or an iterator that parses as it goes
    (blockbatch/core/ingest.py ``stream_records``): they are taken
    :data:`INSERT_BATCH_BLOCKS` at a time, and the next batch is parsed (and its rows
    made, :func:`block_records`) in a thread while Postgres stores the one before, so
    parsing and storing overlap and at most two batches are held. All the batches share
    the transaction that stores the document: an error part-way (the parser's included,
    raised as it meets it) leaves nothing. A document already stored is not stored again;
    its ``blocks`` are still read to the end, so a file that does not parse is refused as
    it would be the first time.

    ``columns`` are the input's own columns in file order and ``text_column`` the one that
    held the text (blockbatch/core/ingest.py ``record_columns``), for exports that give rows
    back their columns; a callable is asked once the blocks are stored (streamed blocks
    tell their columns as they pass).

    A paged document's file (:data:`PAGED_FORMATS`, up to :data:`MAX_STORED_FILE_BYTES`) is
    stored with it, in the same transaction; storing the same bytes again adds the file to a
    document stored without one.
    """
    digest = hashlib.sha256(fmt.encode() + b"\0" + raw).hexdigest()
    document_id = document_id_for(fmt, raw, read_as)
    it = iter(blocks)

    def next_rows() -> list[tuple[Any, ...]]:
        """The next batch's rows; ``[]`` once the blocks are done (run in a thread)."""
        return block_records(document_id, name, itertools.islice(it, INSERT_BATCH_BLOCKS))

    async with conn.transaction():
        rows = await asyncio.to_thread(next_rows)
        inserted = await conn.fetchval(
            """insert into documents (document_id, name, format, content_sha256, block_count,
                                      record_columns, text_column)
               values ($1, $2, $3, $4, $5, null, null)
               on conflict (document_id) do nothing
               returning document_id""",
            document_id,
            name,
            fmt,
            digest,
            len(rows),
        )
        if fmt in PAGED_FORMATS and len(raw) <= MAX_STORED_FILE_BYTES:
            await conn.execute(
                """insert into document_files (document_id, format, bytes, size_bytes)
                   values ($1, $2, $3, $4) on conflict (document_id) do nothing""",
                document_id,
                fmt,
                raw,
                len(raw),
            )
        if inserted is None:
            # Parsed to the end: its errors, not its blocks.
            await asyncio.to_thread(collections.deque, it, 0)
            return document_id
        count = 0
        while rows:
            ahead = asyncio.ensure_future(asyncio.to_thread(next_rows))
            try:
                await _insert_rows(conn, rows)
            except BaseException:
                # The thread finishes the batch it is making (it cannot be stopped); what
                # it makes or raises is dropped with the transaction.
                ahead.cancel()
                raise
            count += len(rows)
            rows = await ahead
        kept = columns() if callable(columns) else columns
        await conn.execute(
            """update documents set block_count = $2, record_columns = $3, text_column = $4
               where document_id = $1""",
            document_id,
            count,
            kept,
            text_column if kept is not None else None,
        )
    return document_id


async def _insert_rows(conn: asyncpg.Connection, rows: list[tuple[Any, ...]]) -> None:
    """One batch of a document's rows (:func:`block_records` of at most
    :data:`INSERT_BATCH_BLOCKS` blocks), by ``COPY`` (binary): a third less CPU than an
    ``insert ... select from unnest`` of arrays, in this process and in Postgres
    (docs/benchmarks.md 3.3). It runs in the caller's transaction."""
    await conn.copy_records_to_table("blocks", columns=BLOCK_COLUMNS, records=rows)


def block_records(
    document_id: str, name: str, blocks: Iterable[ParsedBlock]
) -> list[tuple[Any, ...]]:
    """The rows :func:`_insert_rows` stores for ``blocks``, in :data:`BLOCK_COLUMNS`'
    order (the jsonb columns as the pool's codec takes them).

    A block's provenance is the same JSON as :func:`_provenance`'s, written from parts
    made once: the file's name, and the heading path the blocks under one heading share
    (``stream_records`` gives them one tuple); only a block with a page is encoded whole.
    """
    source = json.dumps(name)
    path: tuple[str, ...] | None = None
    path_json = ""
    rows = []
    for b in blocks:
        p = b.provenance
        if p is None or p.page is not None or p.bbox is not None or p.page_size is not None:
            provenance: Any = _provenance(name, b)
        else:
            if p.heading_path is not path:
                path, path_json = p.heading_path, json.dumps(list(p.heading_path))
            provenance = JsonText(
                f'{{"source": {source}, "char_start": {p.char_start}, '
                f'"char_end": {p.char_end}, "heading_path": {path_json}}}'
            )
        content = b.block_content
        rows.append(
            (
                f"{document_id}:{b.block_index}",
                document_id,
                b.block_index,
                b.block_type,
                content,
                b.metadata,
                estimate_tokens(content),
                block_digest(b.block_type, content),
                provenance,
            )
        )
    return rows


#: The columns :func:`_insert_rows` fills, in its records' order.
BLOCK_COLUMNS = (
    "block_uid",
    "document_id",
    "block_index",
    "block_type",
    "block_content",
    "metadata",
    "est_tokens",
    "content_sha256",
    "provenance",
)


def _provenance(name: str, block: ParsedBlock) -> dict[str, Any] | None:
    """A block's stored provenance: the source file's name and where in it the block is."""
    if block.provenance is None:
        return None
    return {"source": name, **block.provenance.as_json()}


async def save_schema(conn: asyncpg.Connection, spec: SchemaSpec) -> str:
    """Store a validated schema once (by content) and return its id."""
    digest = spec.content_hash()
    schema_id = schema_id_for(spec)
    await conn.execute(
        """insert into schemas (schema_id, name, definition, content_sha256)
           values ($1, $2, $3, $4) on conflict do nothing""",
        schema_id,
        spec.name,
        spec.model_dump(mode="json"),
        digest,
    )
    return schema_id


@dataclass(frozen=True)
class RunInputs:
    """What starting a run needs to know of its document and schema."""

    document_name: str
    schema_name: str
    #: The stored schema definition (its ``prompt_config`` may name a model).
    definition: dict[str, Any]


async def run_inputs(conn: asyncpg.Connection, document_id: str, schema_id: str) -> RunInputs:
    """The names of a run's document and schema, and the schema's definition.

    Raises:
        NotFound: the document or the schema is not stored.
    """
    names = await conn.fetchrow(
        """select d.name as document, s.name as schema, s.definition
           from documents d, schemas s where d.document_id = $1 and s.schema_id = $2""",
        document_id,
        schema_id,
    )
    if names is None:
        raise NotFound(f"unknown document {document_id!r} or schema {schema_id!r}")
    return RunInputs(
        document_name=names["document"], schema_name=names["schema"], definition=names["definition"]
    )


async def schema_definition(conn: asyncpg.Connection, schema_id: str) -> dict[str, Any]:
    """A stored schema's definition, its keys in the order they were stored.

    Raises:
        NotFound: no such schema.
    """
    definition = await schema_definition_or_none(conn, schema_id)
    if definition is None:
        raise NotFound(f"unknown schema {schema_id!r}")
    return definition


async def schema_definition_or_none(
    conn: asyncpg.Connection, schema_id: str
) -> dict[str, Any] | None:
    """A stored schema's definition, or ``None`` when it is not stored."""
    definition = await conn.fetchval(
        "select definition from schemas where schema_id = $1", schema_id
    )
    return None if definition is None else dict(definition)


def new_run_id() -> str:
    """A fresh run id: UTC time to the second plus six random hex digits."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(3)}"


async def create_run(
    conn: asyncpg.Connection,
    document_id: str,
    schema_id: str,
    options: RunOptions,
    run_id: str | None = None,
) -> str:
    """Insert a run row (status ``created``); planning happens in the workflow."""
    run_id = run_id or new_run_id()
    try:
        get_model(options.model)
    except RetiredModelError:
        raise
    except UnknownModelError:
        pass  # a model the front door priced from configuration (core.run_model)
    try:
        await conn.execute(
            """insert into runs (run_id, document_id, schema_id, model, settings, workflow_id)
               values ($1, $2, $3, $4, $5, $6)""",
            run_id,
            document_id,
            schema_id,
            options.model,
            options.model_dump(mode="json"),
            f"run-{run_id}",
        )
    except asyncpg.UniqueViolationError:
        raise ValueError(
            f"run id {run_id!r} already exists: choose another id or omit it"
        ) from None
    except asyncpg.ForeignKeyViolationError as exc:
        raise NotFound(f"unknown document or schema for the run: {exc.detail}") from None
    return run_id


async def delete_run(conn: asyncpg.Connection, run_id: str) -> None:
    """Remove a run row that never got a workflow (nothing else refers to it yet)."""
    await conn.execute("delete from runs where run_id = $1", run_id)


async def save_prefix_tokens(
    conn: asyncpg.Connection | asyncpg.Pool, sha256: str, input_tokens: int
) -> None:
    """Keep a prompt prefix's counted size (``blockbatch.store.reads.prefix_to_count``); once."""
    await conn.execute(
        "update prompt_prefixes set input_tokens = $2 where sha256 = $1 and input_tokens is null",
        sha256,
        input_tokens,
    )
