"""Ingest: markdown, plain text, JSONL and CSV bytes become blocks, or a clear error."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockbatch.core.ingest import (
    IngestError,
    ParsedBlock,
    Provenance,
    detect_format,
    parse_document,
)
from tests.helpers import examples


def md(text: str) -> list[tuple[str, str]]:
    return [(b.block_type, b.block_content) for b in parse_document(text.encode(), "markdown")]


# --- formats -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "fmt"),
    [
        ("notes.md", "markdown"),
        ("NOTES.MARKDOWN", "markdown"),
        ("a.txt", "text"),
        ("a.text", "text"),
        ("rows.jsonl", "jsonl"),
        ("rows.ndjson", "jsonl"),
        ("table.csv", "csv"),
        ("dir.v2/table.csv", "csv"),
    ],
)
def test_detect_format_by_extension(filename: str, fmt: str) -> None:
    assert detect_format(filename) == fmt


@pytest.mark.parametrize("filename", ["report.odt", "README", "data.json"])
def test_unsupported_extension_error_lists_supported_ones(filename: str) -> None:
    with pytest.raises(IngestError) as err:
        detect_format(filename)
    for ext in (".md", ".txt", ".jsonl", ".csv", ".pdf", ".docx", ".pptx", ".html", ".xlsx"):
        assert ext in str(err.value)


def test_unknown_format_name_is_rejected() -> None:
    with pytest.raises(IngestError, match="supported formats"):
        parse_document(b"x", "odt")


# --- encoding ------------------------------------------------------------------------


def test_non_utf8_error_names_byte_offset() -> None:
    data = "héllo\nwörld".encode("latin-1")
    with pytest.raises(IngestError) as err:
        parse_document(data, "text")
    message = str(err.value)
    assert "offset 1" in message
    assert "0xe9" in message
    assert "UTF-8" in message and "re-save" in message


def test_non_utf8_error_names_the_line() -> None:
    data = b"line one\nline two\nbad \xff here"
    with pytest.raises(IngestError, match=r"offset 22 \(line 3\)"):
        parse_document(data, "markdown")


def test_utf8_bom_is_ignored() -> None:
    blocks = parse_document("\ufeff# Title\n\nBody".encode(), "markdown")
    assert [(b.block_type, b.block_content) for b in blocks] == [
        ("heading", "Title"),
        ("paragraph", "Body"),
    ]


def test_nul_byte_is_rejected_as_binary() -> None:
    with pytest.raises(IngestError, match="NUL byte at byte offset 3"):
        parse_document(b"abc\x00def", "text")


def test_crlf_and_cr_line_endings_are_normalised() -> None:
    blocks = parse_document(b"one\r\ntwo\r\n\r\nthree\rfour", "text")
    assert [b.block_content for b in blocks] == ["one\ntwo", "three\nfour"]


# --- empty documents -----------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["markdown", "text", "jsonl", "csv"])
@pytest.mark.parametrize("data", [b"", b"   \n\n\t\n"])
def test_empty_document_has_no_blocks_error(fmt: str, data: bytes) -> None:
    with pytest.raises(IngestError, match=r"^document has no blocks: "):
        parse_document(data, fmt)


def test_markup_only_markdown_has_no_blocks() -> None:
    with pytest.raises(IngestError, match="document has no blocks"):
        parse_document(b"---\n\n***\n\n#\n", "markdown")


# --- markdown ------------------------------------------------------------------------


def test_atx_headings_keep_level_and_drop_closing_hashes() -> None:
    blocks = parse_document(b"# One #\n## Two\n###### Six ######\n####### not", "markdown")
    assert [(b.block_type, b.block_content, b.metadata.get("level")) for b in blocks] == [
        ("heading", "One", 1),
        ("heading", "Two", 2),
        ("heading", "Six", 6),
        ("paragraph", "####### not", None),
    ]


def test_hash_without_space_is_not_a_heading() -> None:
    assert md("#hashtag and C#") == [("paragraph", "#hashtag and C#")]


def test_setext_headings() -> None:
    blocks = parse_document(b"Big\n===\n\nSmall\n---\n", "markdown")
    assert [(b.block_type, b.block_content, b.metadata["level"]) for b in blocks] == [
        ("heading", "Big", 1),
        ("heading", "Small", 2),
    ]


def test_paragraph_is_consecutive_non_blank_lines() -> None:
    assert md("one\ntwo\n\nthree") == [("paragraph", "one\ntwo"), ("paragraph", "three")]


def test_each_list_item_is_one_block_with_continuation_lines() -> None:
    text = "- first\n  continued\n* second\n+ third\n\n1. one\n2) two\n"
    assert md(text) == [
        ("list_item", "first\ncontinued"),
        ("list_item", "second"),
        ("list_item", "third"),
        ("list_item", "one"),
        ("list_item", "two"),
    ]


def test_list_item_metadata_says_ordered_marker_and_depth() -> None:
    blocks = parse_document(b"3. three\n   - nested\n4. four", "markdown")
    assert [b.metadata["depth"] for b in blocks] == [0, 1, 0]
    assert blocks[0].metadata["ordered"] is True
    assert blocks[0].metadata["number"] == 3
    assert blocks[1].metadata["marker"] == "-"
    assert blocks[1].metadata["ordered"] is False


def test_list_item_keeps_indented_paragraph_after_blank_line() -> None:
    assert md("- item\n\n  more of the item\n\nafter") == [
        ("list_item", "item\n\nmore of the item"),
        ("paragraph", "after"),
    ]


def test_list_item_keeps_its_fenced_code_whole() -> None:
    text = "- run this:\n  ```sh\n  - not an item\n\n  echo hi\n  ```\n- next"
    assert md(text) == [
        ("list_item", "run this:\n```sh\n- not an item\n\necho hi\n```"),
        ("list_item", "next"),
    ]


def test_number_inside_prose_does_not_start_a_list() -> None:
    assert md("It happened in\n1999. Then it ended.") == [
        ("paragraph", "It happened in\n1999. Then it ended.")
    ]


def test_table_is_one_block() -> None:
    text = "| a | b |\n|---|---|\n| 1 | 2 |\n\nafter"
    blocks = parse_document(text.encode(), "markdown")
    assert (blocks[0].block_type, blocks[0].block_content) == ("table", text.split("\n\n")[0])
    assert blocks[0].metadata["rows"] == 3
    assert blocks[1].block_content == "after"


def test_table_without_outer_pipes_is_one_block() -> None:
    assert md("a | b\n--- | ---\n1 | 2") == [("table", "a | b\n--- | ---\n1 | 2")]


def test_fenced_code_is_one_block_with_blank_lines_and_language() -> None:
    text = "```python\ndef f():\n\n    # not a heading\n    return 1\n```\nafter"
    blocks = parse_document(text.encode(), "markdown")
    assert blocks[0].block_type == "code"
    assert blocks[0].block_content == "def f():\n\n    # not a heading\n    return 1"
    assert blocks[0].metadata["language"] == "python"
    assert blocks[1].block_content == "after"


def test_tilde_fence_and_unclosed_fence_runs_to_end() -> None:
    assert md("~~~\na\n```\nb\n~~~") == [("code", "a\n```\nb")]
    assert md("```\nnever closed\n\n# still code") == [("code", "never closed\n\n# still code")]


def test_indented_code_block() -> None:
    blocks = parse_document(b"para\n\n    code line\n      more\n\nafter", "markdown")
    assert [(b.block_type, b.block_content) for b in blocks] == [
        ("paragraph", "para"),
        ("code", "code line\n  more"),
        ("paragraph", "after"),
    ]


def test_blockquote_strips_markers_and_keeps_lazy_lines() -> None:
    assert md("> quoted\n> more\nlazy\n\nafter") == [
        ("blockquote", "quoted\nmore\nlazy"),
        ("paragraph", "after"),
    ]


def test_thematic_break_and_front_matter_are_not_blocks() -> None:
    assert md("---\ntitle: x\n---\nBody\n\n***\n\nEnd") == [
        ("paragraph", "Body"),
        ("paragraph", "End"),
    ]


def test_block_index_is_document_order_and_source_line_is_recorded() -> None:
    blocks = parse_document(b"# T\n\npara\n\n- item", "markdown")
    assert [b.block_index for b in blocks] == [0, 1, 2]
    assert [b.metadata["source_line"] for b in blocks] == [1, 3, 5]


def test_whitespace_only_blocks_are_skipped() -> None:
    assert md("#   \n\n-   \n\n```\n   \n```\n\nreal") == [("paragraph", "real")]


def test_parsed_block_is_frozen() -> None:
    block = parse_document(b"x", "text")[0]
    assert block == ParsedBlock(0, "paragraph", "x", {"source_line": 1}, Provenance(0, 1))
    with pytest.raises(AttributeError):
        block.block_content = "y"  # type: ignore[misc]  # the write a frozen block refuses


# Markdown round trip: render blocks, parse them back, get the same blocks.

_word = st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=8)
_line = st.lists(_word, min_size=1, max_size=6).map(" ".join)
_code_line = st.one_of(_line, st.just(""), _line.map(lambda s: "# " + s), _line.map("- {}".format))


@st.composite
def _md_block(draw: st.DrawFn) -> tuple[str, str, str]:
    kind = draw(
        st.sampled_from(["heading", "paragraph", "list_item", "code", "blockquote", "table"])
    )
    if kind == "heading":
        text = draw(_line)
        return kind, text, "#" * draw(st.integers(1, 6)) + " " + text
    if kind == "paragraph":
        text = "\n".join(draw(st.lists(_line, min_size=1, max_size=3)))
        return kind, text, text
    if kind == "list_item":
        text = draw(_line)
        marker = draw(st.sampled_from(["-", "*", "+", "1.", "7)"]))
        return kind, text, f"{marker} {text}"
    if kind == "blockquote":
        lines = draw(st.lists(_line, min_size=1, max_size=3))
        return kind, "\n".join(lines), "\n".join("> " + x for x in lines)
    if kind == "table":
        cols = draw(st.integers(1, 3))
        rows = draw(st.lists(st.lists(_word, min_size=cols, max_size=cols), min_size=1, max_size=3))
        lines = ["| " + " | ".join(r) + " |" for r in rows]
        lines.insert(1, "|" + "---|" * cols)
        text = "\n".join(lines)
        return kind, text, text
    body = draw(st.lists(_code_line, min_size=1, max_size=5).filter(lambda ls: any(ls)))
    text = "\n".join(body)
    fence = draw(st.sampled_from(["```", "~~~~"]))
    return kind, text, f"{fence}{draw(st.sampled_from(['', 'python']))}\n{text}\n{fence}"


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(_md_block(), min_size=1, max_size=8))
def test_markdown_round_trip(blocks: list[tuple[str, str, str]]) -> None:
    document = "\n\n".join(source for _, _, source in blocks)
    parsed = parse_document(document.encode(), "markdown")
    assert [(b.block_type, b.block_content) for b in parsed] == [(k, t) for k, t, _ in blocks]
    assert [b.block_index for b in parsed] == list(range(len(blocks)))


@settings(max_examples=examples(200), deadline=None)
@given(st.text(max_size=300))
def test_markdown_never_crashes_and_never_yields_blank_blocks(text: str) -> None:
    try:
        blocks = parse_document(text.encode(), "markdown")
    except IngestError as err:
        assert str(err).startswith(("document has no blocks", "the file contains a NUL"))
        return
    assert all(b.block_content.strip() for b in blocks)
    assert [b.block_index for b in blocks] == list(range(len(blocks)))


# --- plain text ----------------------------------------------------------------------


def test_plain_text_paragraphs_split_on_blank_lines() -> None:
    blocks = parse_document(b"# not a heading\nstill\n\n\n  next para  \n", "text")
    assert [(b.block_type, b.block_content) for b in blocks] == [
        ("paragraph", "# not a heading\nstill"),
        ("paragraph", "next para"),
    ]
    assert [b.metadata["source_line"] for b in blocks] == [1, 5]


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.lists(_line, min_size=1, max_size=3).map("\n".join), min_size=1, max_size=6))
def test_plain_text_round_trip(paragraphs: list[str]) -> None:
    blocks = parse_document("\n\n".join(paragraphs).encode(), "text")
    assert [b.block_content for b in blocks] == paragraphs


# --- JSONL ---------------------------------------------------------------------------


def test_jsonl_one_block_per_line_with_other_keys_in_metadata() -> None:
    data = b'{"text": "first", "page": 2}\n\n{"text": "second", "type": "heading"}\n'
    blocks = parse_document(data, "jsonl")
    assert [(b.block_type, b.block_content) for b in blocks] == [
        ("record", "first"),
        ("heading", "second"),
    ]
    assert blocks[0].metadata == {"page": 2, "source_line": 1}
    assert blocks[1].metadata == {"source_line": 3}


def test_jsonl_block_type_key_wins_over_type() -> None:
    block = parse_document(b'{"text": "x", "block_type": "table", "type": "t"}', "jsonl")[0]
    assert block.block_type == "table"
    assert block.metadata["type"] == "t"


def test_jsonl_custom_text_field() -> None:
    block = parse_document(b'{"body": "hello", "text": "meta"}', "jsonl", text_field="body")[0]
    assert block.block_content == "hello"
    assert block.metadata["text"] == "meta"


def test_jsonl_bad_line_error_names_line_number() -> None:
    with pytest.raises(IngestError, match=r"line 2 is not valid JSON"):
        parse_document(b'{"text": "ok"}\n{"text": oops}\n', "jsonl")


def test_jsonl_non_object_line_is_rejected() -> None:
    with pytest.raises(IngestError, match=r"line 1 is a JSON list, not an object"):
        parse_document(b'["text"]', "jsonl")


def test_jsonl_missing_field_error_lists_keys() -> None:
    with pytest.raises(IngestError) as err:
        parse_document(b'{"text": "a"}\n{"body": "b", "id": 1}', "jsonl")
    message = str(err.value)
    assert "line 2" in message and "'text'" in message
    assert "'body', 'id'" in message and "text_field" in message


def test_jsonl_non_string_text_is_rejected() -> None:
    with pytest.raises(IngestError, match="'text' must be a string, got int"):
        parse_document(b'{"text": 5}', "jsonl")


def test_jsonl_null_or_blank_text_is_refused_with_line_numbers() -> None:
    with pytest.raises(IngestError, match=r"^lines 1, 2 have an empty 'text'"):
        parse_document(b'{"text": null}\n{"text": "  "}\n{"text": "x"}', "jsonl")


def test_jsonl_escaped_nul_is_rejected() -> None:
    with pytest.raises(IngestError, match="NUL character"):
        parse_document(json.dumps({"text": "a\u0000b"}).encode(), "jsonl")


@pytest.mark.parametrize(
    "record",
    [
        {"text": "ok", "note": "a\u0000b"},
        {"text": "ok", "tags": ["x", {"deep": "\u0000"}]},
        {"text": "ok", "a\u0000key": 1},
    ],
    ids=["field", "nested", "key"],
)
def test_jsonl_nul_anywhere_in_a_records_other_fields_is_rejected_with_its_line(
    record: dict[str, object],
) -> None:
    data = b'{"text": "fine"}\n' + json.dumps(record).encode()
    with pytest.raises(IngestError, match=r"block 1 \(line 2\) contains a NUL character"):
        parse_document(data, "jsonl")


def test_jsonl_other_fields_without_nul_are_kept() -> None:
    record = {"text": "ok", "n": 3, "f": 1.5, "b": True, "z": None, "l": ["a", {"k": "v"}]}
    [block] = parse_document(json.dumps(record).encode(), "jsonl")
    assert block.metadata == {**{k: v for k, v in record.items() if k != "text"}, "source_line": 1}


# --- CSV -----------------------------------------------------------------------------


def test_csv_one_block_per_row_with_other_columns_in_metadata() -> None:
    data = b'id,text,type\n1,"hello, world",paragraph\n2,"two\nlines",\n'
    blocks = parse_document(data, "csv")
    assert [(b.block_type, b.block_content) for b in blocks] == [
        ("paragraph", "hello, world"),
        ("record", "two\nlines"),
    ]
    assert blocks[0].metadata == {"id": "1", "source_line": 2}
    assert blocks[1].metadata == {"id": "2", "type": "", "source_line": 3}


def test_csv_missing_text_column_lists_columns() -> None:
    with pytest.raises(IngestError) as err:
        parse_document(b"id,body\n1,x\n", "csv")
    assert "'id', 'body'" in str(err.value)
    assert "text_field" in str(err.value)


def test_csv_custom_text_column() -> None:
    blocks = parse_document(b"id,body\n1,x\n", "csv", text_field="body")
    assert blocks[0].block_content == "x"


def test_csv_ragged_row_names_its_line() -> None:
    with pytest.raises(IngestError, match="line 3: the row has 3 fields but the header has 2"):
        parse_document(b"id,text\n1,a\n2,b,c\n", "csv")


def test_csv_duplicate_column_is_rejected() -> None:
    with pytest.raises(IngestError, match="'text' twice"):
        parse_document(b"text,text\na,b\n", "csv")


def test_csv_long_cells_are_accepted() -> None:
    long = "word " * 60_000
    blocks = parse_document(f'text\n"{long}"\n'.encode(), "csv")
    assert blocks[0].block_content == long.strip()


# --- records without text ------------------------------------------------------------


def test_csv_row_with_empty_text_is_refused_with_its_line_number() -> None:
    # Dropping the row would shift every later block index off its row.
    with pytest.raises(IngestError, match=r"line 3 has an empty 'text'") as err:
        parse_document(b"id,text\n1,hello\n2,\n3,world\n", "csv")
    assert "nothing is stored" in str(err.value)


def test_every_empty_row_is_named_at_once() -> None:
    with pytest.raises(IngestError, match=r"lines 2, 4 have an empty 'body'"):
        parse_document(b"id,body\n1,  \n2,x\n3,\n", "csv", text_field="body")


def test_a_csv_line_with_every_cell_empty_is_not_a_record() -> None:
    blocks = parse_document(b"id,text\n1,a\n,\n2,b\n", "csv")
    assert [b.block_content for b in blocks] == ["a", "b"]
