"""Every export column has its own name: schema fields and input columns never shadow ours."""

from __future__ import annotations

from blockbatch.api.export import (
    CSV_HEAD,
    CSV_TAIL,
    PROVENANCE_COLUMNS,
    column_value,
    evidence_columns,
    export_columns,
    export_line,
    field_columns,
    input_columns,
)
from blockbatch.core.ingest import parse_document, record_columns


def test_a_field_named_like_our_column_gets_a_prefix_and_the_others_keep_their_names() -> None:
    named, taken = field_columns(["block_type", "topic", "status"], [])
    assert named == ["field_block_type", "topic", "field_status"]
    assert {*CSV_HEAD, *CSV_TAIL, *(c for _, c in PROVENANCE_COLUMNS), *named} <= taken


def test_no_two_columns_share_a_name_whatever_the_fields_and_inputs_are_called() -> None:
    fields = ["block_type", "field_block_type", "review_actions", "evidence_topic_quote", "x"]
    spans = evidence_columns(["topic"])
    named, taken = field_columns(fields, spans)
    inputs = input_columns(["block_uid", "x", "field_block_type", "source_line"], taken)
    every = [
        *CSV_HEAD,
        *(c for _, c in inputs),
        *named,
        *(c for _, _, c in spans),
        *(c for _, c in PROVENANCE_COLUMNS),
        *CSV_TAIL,
    ]
    assert len(every) == len(set(every))
    assert named[:2] == ["field_block_type", "field_field_block_type"]


def test_a_csv_input_gets_its_columns_back_in_order_under_their_names_then_the_fields() -> None:
    data = b"ticket_id,subject,text,channel\nT-1,Login,cannot sign in,email\n"
    blocks = parse_document(data, "csv")
    columns = record_columns(data, "csv", blocks)
    assert columns == ["ticket_id", "subject", "text", "channel"]
    layout = export_columns(
        ["topic", "status"],
        [],
        ["channel", "source_line", "subject", "ticket_id"],
        (columns, "text"),
    )
    names = [c.name for c in layout]
    assert names[:6] == ["ticket_id", "subject", "text", "channel", "topic", "field_status"]
    assert "block_content" not in names and "source_line" in names
    assert len(names) == len(set(names))
    text = layout[2]
    row = {"block_content": "cannot sign in", "metadata": {"ticket_id": "T-1"}}
    assert column_value(text, row, None, {}) == "cannot sign in"


def test_an_input_column_named_like_ours_keeps_its_name_and_ours_gives_way() -> None:
    layout = export_columns(["x"], [], ["status"], (["status", "body"], "body"))
    names = [c.name for c in layout]
    assert names[:3] == ["status", "body", "x"]
    assert "blockbatch_status" in names
    theirs = layout[0]
    row = {"metadata": {"status": "open"}, "status": "ai_complete", "block_type": "record"}
    assert column_value(theirs, row, None, {}) == "open"


def test_a_type_column_ingest_took_as_the_block_type_comes_back_under_its_name() -> None:
    data = b'{"id": 7, "type": "faq", "text": "How do I reset?"}\n{"id": 8, "text": "Hi"}\n'
    blocks = parse_document(data, "jsonl")
    columns = record_columns(data, "jsonl", blocks)
    assert columns == ["id", "type", "text"]
    layout = export_columns([], [], ["id", "source_line"], (columns, "text"))
    row = {"metadata": {"id": 7, "source_line": 1}, "block_type": "faq"}
    assert [column_value(c, row, None, {}) for c in layout[:2]] == [7, "faq"]


def test_documents_without_columns_keep_block_content() -> None:
    assert record_columns(b"# Title\n\nText.\n", "markdown", []) is None
    names = [c.name for c in export_columns(["topic"], [], ["level", "source_line"], None)]
    assert names[:4] == list(CSV_HEAD[:4]) and names[3] == "block_content"


def test_a_jsonl_line_gives_the_input_record_back_to_join_on_the_users_own_keys() -> None:
    """A JSONL input's export line carries its record as the file had it (its keys, the
    text under its own name, a column named like one of ours kept), beside ``immutable``."""
    data = (
        b'{"id": "T-1", "body": "cannot sign in", "block_index": 7, "type": "ticket"}\n'
        b'{"id": "T-2", "body": "refund please", "channel": "chat"}\n'
    )
    blocks = parse_document(data, "jsonl", text_field="body")
    columns = record_columns(data, "jsonl", blocks, "body")
    assert columns is not None
    lines = []
    for i, block in enumerate(blocks):
        row = {
            "block_uid": f"doc:{i}",
            "block_index": i,
            "block_type": block.block_type,
            "block_content": block.block_content,
            "metadata": block.metadata,
            "staging": {"topic": "login"},
            "confirmed": None,
            "status": "ai_complete",
            "last_error": None,
            "reason_code": None,
            "reused_from_run_id": None,
            "reused_from_call_id": None,
            "review": [],
            "provenance": None,
            "evidence": None,
            "model_answer": None,
        }
        lines.append(export_line(row, staged=True, record=(columns, "body")))
    first, second = lines
    assert first["record"] == {
        "id": "T-1",
        "body": "cannot sign in",
        "block_index": 7,
        "type": "ticket",
    }
    assert list(first["record"]) == ["id", "body", "block_index", "type"]
    assert second["record"] == {"id": "T-2", "body": "refund please", "channel": "chat"}
    # ``immutable`` stays blockbatch's view of the block.
    assert first["immutable"]["block_index"] == 0
    assert first["immutable"]["block_content"] == "cannot sign in"
    assert first["user_defined"] == {"topic": "login"}
    # A document without columns has no "record".
    assert "record" not in export_line(row, staged=True)
