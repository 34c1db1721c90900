"""Real documents in: ``starter.py run report.pdf --schema S`` on the real stack, each block
stored with where it came from; hostile files refused by the CLI with nothing stored."""

from __future__ import annotations

import io
import zipfile

import docx
import pytest
from fpdf import FPDF

from blockbatch.devtools.pdfgen import report_pdf
from tests.conftest import Stack
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`


async def test_run_of_a_pdf_completes_with_each_blocks_page_and_box(
    cli: Cli, bbstack: Stack
) -> None:
    report = cli.tmp / "report.pdf"
    report.write_bytes(report_pdf(4))
    async with bbstack.worker():
        run = await cli("run", str(report), "--schema", cli.schema())
    assert run.code == 0, run.out + run.err
    # 7 blocks a page and its page number (typed page_number, set aside by the run side)
    assert "32 blocks of report.pdf" in run.out, run.out
    rows = await bbstack.pool.fetch(
        """select b.block_type, b.block_content, b.provenance, o.status from overlays o
           join blocks b using (block_uid) where o.run_id = $1 order by o.block_index""",
        run.run_id,
    )
    assert len(rows) == 32
    assert {r["status"] for r in rows if r["block_type"] != "page_number"} == {"ai_complete"}
    # page numbers: set aside once the run side leaves boilerplate out (h-formats), else sent
    assert {r["status"] for r in rows if r["block_type"] == "page_number"} <= {
        "set_aside",
        "ai_complete",
    }
    assert [r["provenance"]["page"] for r in rows if r["block_type"] == "heading"] == [1, 2, 3, 4]
    first = rows[1]["provenance"]
    assert first["source"] == "report.pdf"
    assert first["heading_path"] == [rows[0]["block_content"]]
    assert len(first["bbox"]) == 4 and first["page_size"] == pytest.approx([595.28, 841.89])
    # The review read carries it too.
    page = await bbstack.bb.review(run.run_id, limit=2)
    prov = page.rows[1].provenance
    assert prov is not None and prov.page == 1 and prov.bbox is not None
    assert prov.heading_path and prov.heading_path[0].startswith("Section 1:")


def _encrypted_pdf() -> bytes:
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("Helvetica", size=12)
    pdf.cell(0, 10, "secret")
    pdf.set_encryption(owner_password="o", user_password="u")
    return bytes(pdf.output())


def _scanned_pdf() -> bytes:
    pdf = FPDF()
    pdf.add_page()
    pdf.rect(20, 20, 150, 200, style="F")
    return bytes(pdf.output())


def _docx_bomb() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", bytes(64 * 2**20))
    return out.getvalue()


def _docx_cut_short() -> bytes:
    document = docx.Document()
    document.add_paragraph("hello")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()[:2000]


@pytest.mark.parametrize(
    ("name", "build", "says"),
    [
        ("locked.pdf", _encrypted_pdf, "password-protected"),
        ("scan.pdf", _scanned_pdf, "no text layer"),
        ("bomb.docx", _docx_bomb, "zip bomb"),
        ("broken.docx", _docx_cut_short, "corrupt"),
        ("notes.odt", lambda: b"PK\x03\x04", "save it as .docx"),
    ],
)
async def test_hostile_file_is_refused_by_the_cli_and_nothing_is_stored(
    cli: Cli, bbstack: Stack, name: str, build: object, says: str
) -> None:
    path = cli.tmp / name
    path.write_bytes(build())  # type: ignore[operator]
    count = "select (select count(*) from documents), (select count(*) from runs)"
    before = tuple(await bbstack.pool.fetchrow(count))
    result = await cli("run", str(path), "--schema", cli.schema())
    assert result.code == 2, result.out + result.err
    assert says in result.err, result.err
    assert tuple(await bbstack.pool.fetchrow(count)) == before
