"""A PDF's blocks where people look: the file kept with its document, each block's page
served as a PNG with its box drawn (the review app's ``/runs/{run}/blocks/{uid}/page.png``),
and every export carrying each block's provenance (JSONL, CSV, Parquet)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import aiohttp
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from blockbatch.core.page_image import BOX_COLOUR, DEFAULT_WIDTH, MAX_WIDTH, box_pixels
from blockbatch.core.run_types import RunOptions
from blockbatch.devtools.pdfgen import report_pdf
from blockbatch.store import repo
from blockbatch.web.app import create_app
from tests.conftest import Stack
from tests.helpers import extract_schema
from tests.web_helpers import DOCUMENT, serving

PROVENANCE_CSV = [
    "provenance_page",
    "provenance_bbox",
    "provenance_page_size",
    "provenance_heading_path",
    "provenance_char_start",
    "provenance_char_end",
]


async def _run(s: Stack, data: bytes, name: str, fmt: str) -> tuple[str, str]:
    doc = await s.bb.ingest_bytes(data, name=name, fmt=fmt)
    schema = await s.bb.add_schema(extract_schema(instruction_words=200))
    async with s.worker():
        run_id = await s.bb.start_run(doc, schema, RunOptions(pack_size=8))
        await s.bb.wait(run_id)
    return run_id, doc


async def _blocks(s: Stack, doc: str) -> list[dict[str, Any]]:
    rows = await s.pool.fetch(
        "select block_uid, block_index, block_type, provenance from blocks "
        "where document_id = $1 order by block_index",
        doc,
    )
    return [dict(r) for r in rows]


def _url(base: str, run_id: str, uid: str) -> str:
    return f"{base}/runs/{run_id}/blocks/{uid.replace(':', '%3A')}/page.png"


async def test_a_pdf_is_kept_with_its_document_and_a_markdown_is_not(bbstack: Stack) -> None:
    data = report_pdf(2, seed=11)
    doc = await bbstack.bb.ingest_bytes(data, name="kept.pdf", fmt="pdf")
    row = await bbstack.pool.fetchrow(
        "select format, bytes, size_bytes from document_files where document_id = $1", doc
    )
    assert row is not None and row["format"] == "pdf"
    assert row["bytes"] == data and row["size_bytes"] == len(data)
    md = await bbstack.bb.ingest_bytes(DOCUMENT, name="runbook.md", fmt="markdown")
    assert (
        await bbstack.pool.fetchval(
            "select count(*) from document_files where document_id = $1", md
        )
        == 0
    )
    # A document stored without its file gets it when the same bytes are ingested again.
    await bbstack.pool.execute("delete from document_files where document_id = $1", doc)
    assert await bbstack.bb.ingest_bytes(data, name="kept.pdf", fmt="pdf") == doc
    assert (
        await bbstack.pool.fetchval("select bytes from document_files where document_id = $1", doc)
        == data
    )


async def test_a_pdf_above_the_cap_ingests_without_its_file(
    bbstack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = report_pdf(1, seed=12)
    monkeypatch.setattr(repo, "MAX_STORED_FILE_BYTES", len(data) - 1)
    run_id, doc = await _run(bbstack, data, "big.pdf", "pdf")
    assert (
        await bbstack.pool.fetchval(
            "select count(*) from document_files where document_id = $1", doc
        )
        == 0
    )
    grid = await bbstack.bb.review(run_id)
    assert grid.rows and not any(r.page_picture for r in grid.rows)
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    async with (
        serving(app) as base,
        aiohttp.ClientSession() as http,
        http.get(_url(base, run_id, f"{doc}:1")) as resp,
    ):
        assert resp.status == 404
        assert "is not stored" in await resp.text()


async def test_the_page_route_draws_the_block_on_its_page(bbstack: Stack) -> None:
    run_id, doc = await _run(bbstack, report_pdf(2, seed=13), "report.pdf", "pdf")
    blocks = await _blocks(bbstack, doc)
    md_run, md_doc = await _run(bbstack, DOCUMENT, "runbook.md", "markdown")
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    async with serving(app) as base, aiohttp.ClientSession() as http:
        # Blocks on both pages, each its own page with its own box.
        for block in (blocks[2], blocks[-1]):
            prov = block["provenance"]
            async with http.get(_url(base, run_id, block["block_uid"])) as resp:
                assert resp.status == 200
                assert resp.headers["content-type"] == "image/png"
                assert resp.headers["cache-control"] == "private, max-age=86400"
                assert "img-src 'self'" in resp.headers["content-security-policy"]
                etag = resp.headers["etag"]
                picture = Image.open(io.BytesIO(await resp.read())).convert("RGB")
            assert picture.width == DEFAULT_WIDTH
            scale = picture.width / prov["page_size"][0]
            x0, y0, x1, y1 = box_pixels(tuple(prov["bbox"]), scale, picture.size)
            for x, y in [(x0, y0), (x1, y1), ((x0 + x1) // 2, y0), (x0, (y0 + y1) // 2)]:
                assert picture.getpixel((x, y)) == BOX_COLOUR, (block["block_index"], x, y)
            assert picture.getpixel((5, 5)) == (255, 255, 255)
            # Asked again with its ETag: not rendered again.
            async with http.get(
                _url(base, run_id, block["block_uid"]), headers={"if-none-match": etag}
            ) as again:
                assert again.status == 304
        # The width is bounded; a width that is not a number is refused.
        async with http.get(_url(base, run_id, blocks[0]["block_uid"]) + "?width=99999") as r:
            assert r.status == 200
            assert Image.open(io.BytesIO(await r.read())).width == MAX_WIDTH
        async with http.get(_url(base, run_id, blocks[0]["block_uid"]) + "?width=-3") as r:
            assert r.status == 400
        # No page: a block of a markdown run, a block not in the run, a run that is not there.
        for url, says in [
            (_url(base, md_run, f"{md_doc}:1"), "markdown document"),
            (_url(base, run_id, f"{md_doc}:1"), "has no block"),
            (_url(base, "no-such-run", f"{doc}:1"), "no run"),
        ]:
            async with http.get(url) as resp:
                assert resp.status == 404
                assert says in await resp.text()
        # The grid offers the page for the PDF's blocks, and nothing new for the markdown's.
        async with http.get(f"{base}/runs/{run_id}") as resp:
            html = await resp.text()
        assert html.count('class="page-view"') == len(blocks)
        assert f"/runs/{run_id}/blocks/{doc}%3A2/page.png" in html
        async with http.get(f"{base}/runs/{md_run}") as resp:
            assert 'class="page-view"' not in await resp.text()


async def test_with_a_token_the_page_needs_sign_in(bbstack: Stack) -> None:
    run_id, doc = await _run(bbstack, report_pdf(1, seed=14), "signed.pdf", "pdf")
    app = create_app(bbstack.bb, bbstack.settings, token="s3cret-token", reviewer="ada")
    async with serving(app) as base, aiohttp.ClientSession() as http:
        async with http.get(_url(base, run_id, f"{doc}:1"), allow_redirects=False) as resp:
            assert resp.status == 303 and resp.headers["location"].startswith("/login")
        headers = {"authorization": "Bearer s3cret-token"}
        async with http.get(_url(base, run_id, f"{doc}:1"), headers=headers) as resp:
            assert resp.status == 200 and resp.headers["content-type"] == "image/png"


async def test_every_export_carries_each_blocks_provenance(bbstack: Stack, tmp_path: Path) -> None:
    run_id, doc = await _run(bbstack, report_pdf(2, seed=15), "exported.pdf", "pdf")
    stored = {b["block_uid"]: b["provenance"] for b in await _blocks(bbstack, doc)}

    out = io.StringIO()
    await bbstack.bb.export(run_id, out, staged=True)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == len(stored)
    for line in lines:
        prov = line["provenance"]
        assert prov == stored[line["immutable"]["block_uid"]]
        assert prov["source"] == "exported.pdf" and prov["page"] in (1, 2)
        assert len(prov["bbox"]) == 4 and len(prov["page_size"]) == 2

    out = io.StringIO()
    await bbstack.bb.export(run_id, out, staged=True, fmt="csv")
    table = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert all(c in table[0] for c in PROVENANCE_CSV)
    for row in table:
        prov = stored[row["block_uid"]]
        assert int(row["provenance_page"]) == prov["page"]
        assert json.loads(row["provenance_bbox"]) == prov["bbox"]
        assert json.loads(row["provenance_page_size"]) == prov["page_size"]
        assert json.loads(row["provenance_heading_path"]) == prov["heading_path"]
        assert int(row["provenance_char_start"]) == prov["char_start"]
        assert int(row["provenance_char_end"]) == prov["char_end"]

    path = tmp_path / "run.parquet"
    await bbstack.bb.export(run_id, path, staged=True, fmt="parquet")
    # read_table looks columns up by name: the schema's own ``block_type`` field is
    # ``field_block_type``, beside the block's ``block_type``.
    parquet = pq.read_table(path)
    names = parquet.schema.names
    assert len(names) == len(set(names)) and "field_block_type" in names
    assert str(parquet.schema.field("provenance_page").type) == "int64"
    bbox_type = parquet.schema.field("provenance_bbox").type
    assert pa.types.is_list(bbox_type) and bbox_type.value_type == pa.float64()
    path_type = parquet.schema.field("provenance_heading_path").type
    assert pa.types.is_list(path_type) and path_type.value_type == pa.string()
    for record in parquet.to_pylist():
        prov = stored[record["block_uid"]]
        assert record["provenance_page"] == prov["page"]
        assert record["provenance_bbox"] == pytest.approx(prov["bbox"])
        assert record["provenance_heading_path"] == prov["heading_path"]
        assert record["provenance_char_end"] == prov["char_end"]


async def test_a_markdown_exports_its_span_and_headings_but_no_page(bbstack: Stack) -> None:
    run_id, _ = await _run(bbstack, DOCUMENT, "runbook.md", "markdown")
    out = io.StringIO()
    await bbstack.bb.export(run_id, out, staged=True, fmt="csv")
    table = list(csv.DictReader(io.StringIO(out.getvalue())))
    rolling = next(r for r in table if r["block_content"].startswith("Roll back with"))
    assert rolling["provenance_page"] == "" and rolling["provenance_bbox"] == ""
    assert json.loads(rolling["provenance_heading_path"]) == [
        "Restarting the queue workers",
        "Rolling back",
    ]
    start, end = int(rolling["provenance_char_start"]), int(rolling["provenance_char_end"])
    assert DOCUMENT.decode()[start:end] == rolling["block_content"]
