"""Inputs a user gets wrong (issue 33, points 7-9): the text column, empty records,
encodings and files that are not what their name says, with the advice each front door
words its own way (``blockbatch.core.commands``)."""

from __future__ import annotations

import codecs
import io

import docx
import openpyxl
import pytest

from blockbatch.core.commands import PROG, flag, option, render
from blockbatch.core.ingest import IngestError, parse_document, parse_records

TICKETS = (
    "ticket_id,customer,body\n"
    "T-1,Acme,The export button does nothing when the report has more than 500 rows.\n"
    "T-2,Globex,We were charged twice for the November invoice; please refund one.\n"
    "T-3,Initech,Password reset emails arrive hours late or not at all since Monday.\n"
)


def refusal(data: bytes, fmt: str, **kwargs: object) -> str:
    with pytest.raises(IngestError) as caught:
        parse_document(data, fmt, **kwargs)  # type: ignore[arg-type]
    return str(caught.value)


# --- the advice, in each front door's words ------------------------------------------


def test_advice_names_the_cli_flag_or_the_python_parameter() -> None:
    advice = f"see `{PROG} list`; use {option('text_field', 'body')} or {flag('skip_empty')}"
    assert render(advice, "blockbatch") == (
        "see `blockbatch list`; use --text-field body or --skip-empty"
    )
    assert render(advice, "python starter.py", "python") == (
        "see `python starter.py list`; use text_field='body' or skip_empty=True"
    )
    # A value a shell would split is quoted; the format option is --format / fmt.
    assert render(option("text_field", "Ticket body"), "x") == "--text-field 'Ticket body'"
    assert render(option("fmt", "xlsx"), "x", "python") == "fmt='xlsx'"
    assert render(option("fmt", "xlsx"), "x") == "--format xlsx"


# --- point 7: the text column ---------------------------------------------------------


def test_a_missing_text_column_names_the_flag_and_the_long_text_column() -> None:
    message = refusal(TICKETS.encode(), "csv")
    assert "has no 'text' column" in message
    assert "'ticket_id', 'customer', 'body'" in message
    cli = render(message, "blockbatch")
    assert "with --text-field," in cli
    assert "the long text looks to be in 'body': --text-field body" in cli
    assert "text_field" not in cli
    python = render(message, "blockbatch", "python")
    assert "text_field='body'" in python and "--text-field" not in python


def test_no_column_is_suggested_when_none_is_clearly_the_long_text() -> None:
    message = refusal(b"id,a,b\n1," + b"x" * 40 + b"," + b"y" * 35 + b"\n", "csv")
    assert "looks to be in" not in message
    short = refusal(b"id,name\n1,Ann\n2,Bob\n", "csv")
    assert "looks to be in" not in short


def test_a_jsonl_record_without_the_key_suggests_its_long_text() -> None:
    line = b'{"id": "T-1", "body": "The export button does nothing at all, again."}\n'
    cli = render(refusal(line, "jsonl"), "blockbatch")
    assert "line 1 has no 'text' key" in cli
    assert "--text-field body" in cli


def test_an_xlsx_sheet_without_the_text_column_suggests_its_long_text() -> None:
    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    for row in TICKETS.splitlines():
        sheet.append(row.split(",", 2))
    out = io.BytesIO()
    book.save(out)
    cli = render(refusal(out.getvalue(), "xlsx"), "blockbatch")
    assert "has a 'text' column" in cli and "--text-field body" in cli


# --- point 8: empty records -----------------------------------------------------------

HELPDESK = b"id,text\n1,printer on fire\n2,\n3,  \n4,cannot log in\n"


def test_empty_records_are_refused_naming_the_lines_and_the_flag() -> None:
    message = render(refusal(HELPDESK, "csv"), "blockbatch")
    assert message.startswith("lines 3, 4 have an empty 'text'")
    assert "--skip-empty" in message
    assert "run again" in message and "upload" not in message


def test_skip_empty_keeps_the_rest_and_says_which_lines_were_skipped() -> None:
    parsed = parse_records(HELPDESK, "csv", skip_empty=True)
    assert [b.block_content for b in parsed.blocks] == ["printer on fire", "cannot log in"]
    # Each kept block still joins back to its own line.
    assert [b.metadata["source_line"] for b in parsed.blocks] == [2, 5]
    assert parsed.skipped == (3, 4)
    assert parsed.skipped_text() == "skipped 2 records with an empty text: lines 3, 4"
    jsonl = parse_records(b'{"text": "a"}\n{"text": null}\n', "jsonl", skip_empty=True)
    assert jsonl.skipped == (2,) and len(jsonl.blocks) == 1
    assert parse_records(b"text\na\n", "csv", skip_empty=True).skipped_text() is None


def test_skip_empty_with_every_record_empty_is_still_refused() -> None:
    message = refusal(b"id,text\n1,\n2,\n", "csv", skip_empty=True)
    assert "document has no blocks" in message and "2 skipped" in message


# --- point 9: encodings and disguised files -------------------------------------------


@pytest.mark.parametrize(
    "encoded",
    [
        codecs.BOM_UTF16_LE + TICKETS.encode("utf-16-le"),
        codecs.BOM_UTF16_BE + TICKETS.encode("utf-16-be"),
        TICKETS.encode("utf-16"),
        TICKETS.encode("utf-16-le"),  # no BOM: told by its zero bytes
        codecs.BOM_UTF8 + TICKETS.encode(),
        TICKETS.encode("utf-32"),
    ],
    ids=["utf16le-bom", "utf16be-bom", "utf16-native", "utf16le-no-bom", "utf8-bom", "utf32"],
)
def test_a_csv_in_utf16_or_with_a_bom_is_read(encoded: bytes) -> None:
    blocks = parse_document(encoded, "csv", text_field="body")
    assert [b.metadata["ticket_id"] for b in blocks] == ["T-1", "T-2", "T-3"]
    assert blocks[0].block_content.startswith("The export button")


def test_non_ascii_text_in_utf16_survives() -> None:
    text = 'text\n"Café crème, naïve façade: ☕ ünïcode"\n'
    blocks = parse_document(codecs.BOM_UTF16_LE + text.encode("utf-16-le"), "csv")
    assert blocks[0].block_content == "Café crème, naïve façade: ☕ ünïcode"


def test_an_xlsx_renamed_csv_is_named_as_a_workbook_with_the_format_to_use() -> None:
    book = openpyxl.Workbook()
    out = io.BytesIO()
    book.save(out)
    message = render(refusal(out.getvalue(), "csv"), "blockbatch")
    assert "not valid UTF-8" not in message
    assert "Excel workbook (.xlsx)" in message
    assert "--format xlsx" in message


def test_a_docx_renamed_txt_and_a_pdf_renamed_csv_are_named() -> None:
    document = docx.Document()
    document.add_paragraph("hello")
    out = io.BytesIO()
    document.save(out)
    word = render(refusal(out.getvalue(), "text"), "blockbatch")
    assert "Word document (.docx)" in word and "--format docx" in word
    pdf = render(refusal(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", "csv"), "blockbatch")
    assert "it is a PDF" in pdf and "--format pdf" in pdf


def test_another_zip_is_named_a_zip_archive() -> None:
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("rows.csv", "text\na\n")
    assert "zip archive" in refusal(out.getvalue(), "csv")


def test_a_windows_1252_file_says_which_byte_and_to_save_as_utf8() -> None:
    message = refusal("text\nna\u00efve\n".encode("cp1252"), "csv")
    assert "not valid UTF-8: byte 0xef" in message
    assert "UTF-8 and run again" in message
