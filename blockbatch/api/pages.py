"""A PDF block's page as a picture with the block's box on it, for the review app.

The picture is made from the document's stored file (``document_files``, written with the
document by blockbatch/store/repo.py ``save_document``) and the block's provenance (page
and box), by blockbatch/core/page_image.py. A block of a document that is not a PDF, a
block without a box, and a PDF whose file is not kept (above ``MAX_STORED_FILE_BYTES``)
have no page picture: :class:`NotFound` says which.
"""

from __future__ import annotations

import asyncpg

from blockbatch.core.page_image import PageImageError, bounded_width, render_block_page
from blockbatch.store.reads import block_source
from blockbatch.store.repo import MAX_STORED_FILE_BYTES, PAGED_FORMATS, NotFound


async def block_page_png(
    pool: asyncpg.Pool, run_id: str, block_uid: str, *, width: int | None = None
) -> bytes:
    """The block's page as PNG bytes, ``width`` pixels wide (bounded), its box outlined.

    PDFium is not thread-safe, so the page renders on the calling thread; at the default
    width an A4 page takes about 60 ms.

    Raises:
        NotFound: no such run or block, or the block has no page picture (why, in the
            message).
    """
    source = await block_source(pool, run_id, block_uid)
    prov = source.provenance or {}
    if source.format not in PAGED_FORMATS:
        raise NotFound(f"block {block_uid} is from a {source.format} document: no page to show")
    if prov.get("page") is None or prov.get("bbox") is None:
        raise NotFound(f"block {block_uid} has no page and box in its provenance")
    if source.file is None:
        raise NotFound(
            f"the PDF of block {block_uid} is not stored: files above "
            f"{MAX_STORED_FILE_BYTES // 2**20} MiB are not kept, and a document stored "
            "before files were kept has none (ingest the same file again to add it)"
        )
    x0, y0, x1, y1 = (float(v) for v in prov["bbox"])
    try:
        return render_block_page(
            source.file, int(prov["page"]), (x0, y0, x1, y1), width=bounded_width(width)
        )
    except PageImageError as err:
        raise NotFound(f"block {block_uid}: {err}") from None
