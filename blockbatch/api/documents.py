"""Documents and schemas in (part of :class:`~blockbatch.api.client.Blockbatch`)."""

from __future__ import annotations

import warnings
from pathlib import Path

from blockbatch.api.connection import Connection
from blockbatch.api.errors import EmptyRecordsSkipped, speaks_python
from blockbatch.api.inputs import SchemaSource, as_schema
from blockbatch.core.convert.limits import check_size
from blockbatch.core.ingest import (
    ConvertOptions,
    ParsedBlock,
    detect_format,
    record_columns,
    stream_records,
)
from blockbatch.store import repo


@speaks_python
class Documents(Connection):
    """Ingest documents and store schemas: what a run is started on."""

    async def ingest_bytes(
        self,
        data: bytes,
        *,
        name: str,
        fmt: str,
        text_field: str = "text",
        skip_empty: bool = False,
        read_as: ConvertOptions | None = None,
        notices: list[str] | None = None,
    ) -> str:
        """Parse and store a document; return its id (the same bytes, read the same way,
        give the same id).

        ``skip_empty``: leave out JSONL/CSV/XLSX records whose text is empty (an
        :class:`EmptyRecordsSkipped` warning lists their lines) instead of refusing them.
        ``read_as``: how HTML, DOCX, PPTX and tables are read
        (``ConvertOptions(html_all=..., table_rows=..., pptx_notes=...)``); ``notices``
        receives what is worth saying about the file (XLSX sheets skipped, PDF pages whose
        text cannot be read).

        The blocks are parsed and stored a batch at a time in one transaction
        (blockbatch/core/ingest.py ``stream_records``, blockbatch/store/repo.py
        ``save_document``): the blocks held at once are a batch, not the document's.
        """
        check_size(data, f"{fmt} document")
        streamed = stream_records(
            data,
            fmt,
            text_field=text_field,
            skip_empty=skip_empty,
            options=read_as,
            notices=notices,
        )
        async with self.pool.acquire() as conn:
            document_id = await repo.save_document(
                conn,
                name,
                fmt,
                data,
                streamed.blocks,
                read_as,
                columns=lambda: streamed.columns(data, fmt, text_field),
                text_column=text_field,
            )
        if (skipped := streamed.skipped_text()) is not None:
            warnings.warn(EmptyRecordsSkipped(skipped), stacklevel=2)
        return document_id

    async def ingest_blocks(
        self,
        data: bytes,
        blocks: list[ParsedBlock],
        *,
        name: str,
        fmt: str,
        read_as: ConvertOptions | None = None,
        text_field: str | None = None,
    ) -> str:
        """Store already parsed blocks; ``data`` (with the ``read_as`` options they were
        parsed with) is what the document id is hashed from. ``text_field``: the column that
        held each CSV/JSONL/XLSX record's text when ``data`` is that file, so exports give
        rows back the file's columns in order."""
        columns = None if text_field is None else record_columns(data, fmt, blocks, text_field)
        async with self.pool.acquire() as conn:
            return await repo.save_document(
                conn, name, fmt, data, blocks, read_as, columns=columns, text_column=text_field
            )

    async def ingest_file(
        self,
        path: str | Path,
        *,
        fmt: str | None = None,
        text_field: str = "text",
        skip_empty: bool = False,
        read_as: ConvertOptions | None = None,
        notices: list[str] | None = None,
    ) -> str:
        """Parse and store a file (format from its extension unless given); return its id.
        ``skip_empty``: as for :meth:`ingest_bytes`."""
        path = Path(path)
        fmt = fmt or detect_format(path.name)
        check_size(path.stat().st_size, f"{fmt} file")  # refused before it is read
        return await self.ingest_bytes(
            path.read_bytes(),
            name=path.name,
            fmt=fmt,
            text_field=text_field,
            skip_empty=skip_empty,
            read_as=read_as,
            notices=notices,
        )

    async def add_schema(self, source: SchemaSource, name: str | None = None) -> str:
        """Validate and store a schema (a dict, a SchemaSpec, JSON text or a file path)."""
        async with self.pool.acquire() as conn:
            return await repo.save_schema(conn, as_schema(source, name))

    async def add_schema_file(self, path: str | Path) -> str:
        """Validate and store the schema in a JSON file; return its id."""
        return await self.add_schema(Path(path))
