"""Every export column has its own name: schema fields and input columns never shadow ours."""

from __future__ import annotations

from blockbatch.api.review import (
    CSV_HEAD,
    CSV_TAIL,
    PROVENANCE_COLUMNS,
    evidence_columns,
    field_columns,
    input_columns,
)


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
