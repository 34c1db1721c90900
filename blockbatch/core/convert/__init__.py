"""Converters of paged and office formats into typed blocks (PDF, DOCX, PPTX, HTML, XLSX).

Each converter takes the file's bytes and returns :class:`blockbatch.core.blocks.RawBlock`
values in reading order, or raises :class:`blockbatch.core.blocks.IngestError` with what
to do. Pure: bytes in, blocks out, no file or network access; the parsing libraries are
imported when a format is first read, so importing the core stays light.
"""
