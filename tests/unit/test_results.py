"""Result parsing: strictly by block_uid, valid part kept, the rest reported."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockbatch.core.prompt import TOOL_NAME
from blockbatch.core.results import PackResults, parse_results
from blockbatch.core.schema import SchemaSpec, load_schema
from tests.helpers import examples

SPEC: SchemaSpec = load_schema(
    {
        "properties": {
            "sentiment": {"type": "string", "enum": ["positive", "negative"]},
            "summary": {"type": "string", "maxLength": 50},
        },
        "required": ["sentiment"],
        "prompt_config": {"system_instructions": "Rate the tone."},
    }
)
UIDS = ["doc:0", "doc:1", "doc:2"]


def ok(uid: str, **extra: Any) -> dict[str, Any]:
    return {"block_uid": uid, "sentiment": "positive", **extra}


def response(results: Any, stop_reason: str = "tool_use", *, text: bool = False) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": "Here are the results."})
    content.append(
        {"type": "tool_use", "id": "toolu_1", "name": TOOL_NAME, "input": {"results": results}}
    )
    return {"type": "message", "role": "assistant", "content": content, "stop_reason": stop_reason}


def parse(resp: dict[str, Any], uids: list[str] | None = None) -> PackResults:
    return parse_results(resp, UIDS if uids is None else uids, SPEC)


def test_all_results_valid() -> None:
    got = parse(response([ok(u) for u in UIDS], text=True))
    assert got.valid == {u: {"sentiment": "positive"} for u in UIDS}
    assert not (got.invalid or got.missing or got.duplicates or got.unknown)
    assert got.payload_error is None and not got.truncated
    assert got.unfinished == [] and not got.mapping_failed
    assert got.summary() == "ok: 3 valid"


def test_results_map_by_uid_not_by_position() -> None:
    results = [ok("doc:2", summary="two"), ok("doc:0", summary="zero"), ok("doc:1", summary="one")]
    got = parse(response(results))
    assert got.valid["doc:0"]["summary"] == "zero"
    assert got.valid["doc:2"]["summary"] == "two"


@settings(max_examples=examples(100), deadline=None)
@given(st.permutations(range(6)))
def test_any_order_of_results_maps_the_same(order: list[int]) -> None:
    uids = [f"d:{i}" for i in range(6)]
    results = [ok(uids[i], summary=f"s{i}") for i in order]
    got = parse(response(results), uids)
    assert got.valid == {f"d:{i}": {"sentiment": "positive", "summary": f"s{i}"} for i in range(6)}


def test_overlay_excludes_block_uid() -> None:
    got = parse(response([ok(u) for u in UIDS]))
    assert all("block_uid" not in overlay for overlay in got.valid.values())


def test_missing_uid_is_listed_in_expected_order() -> None:
    got = parse(response([ok("doc:1")]))
    assert got.missing == ["doc:0", "doc:2"]
    assert got.unfinished == ["doc:0", "doc:2"]
    assert got.mapping_failed
    assert got.summary() == "2 missing"


def test_duplicate_uid_discards_both_copies() -> None:
    results = [ok("doc:0"), ok("doc:1", summary="a"), ok("doc:1", summary="b"), ok("doc:2")]
    got = parse(response(results))
    assert got.duplicates == ["doc:1"]
    assert "doc:1" not in got.valid and "doc:1" not in got.invalid
    assert set(got.valid) == {"doc:0", "doc:2"}
    assert got.unfinished == ["doc:1"]
    assert got.mapping_failed


def test_unknown_uid_is_a_mapping_failure_but_keeps_the_valid_part() -> None:
    got = parse(response([*[ok(u) for u in UIDS], ok("doc:99"), ok("other:0")]))
    assert got.unknown == ["doc:99", "other:0"]
    assert set(got.valid) == set(UIDS)
    assert got.unfinished == []
    assert got.mapping_failed
    assert got.summary() == "2 unknown uids"


def test_uid_must_match_verbatim() -> None:
    got = parse(response([ok(" doc:0"), ok("doc:1"), ok("doc:2")]))
    assert got.missing == ["doc:0"] and got.unknown == [" doc:0"]


def test_result_failing_the_schema_is_invalid_with_a_reason() -> None:
    results = [ok("doc:0"), {"block_uid": "doc:1", "sentiment": "meh"}, ok("doc:2")]
    got = parse(response(results))
    assert set(got.valid) == {"doc:0", "doc:2"}
    assert got.invalid["doc:1"].startswith("sentiment: 'meh' is not one of")
    assert got.unfinished == ["doc:1"]
    assert not got.mapping_failed, "a per-block failure is not the pack's fault"
    assert got.summary() == "1 invalid"


def test_missing_required_field_names_it() -> None:
    got = parse(response([{"block_uid": "doc:0", "summary": "x"}]), ["doc:0"])
    assert got.invalid["doc:0"] == "result: 'sentiment' is a required property"


def test_extra_field_is_invalid() -> None:
    got = parse(response([ok("doc:0", mood="happy")]), ["doc:0"])
    assert "mood" in got.invalid["doc:0"]
    assert "Additional properties" in got.invalid["doc:0"]


def test_invalid_reason_is_short_even_for_huge_values() -> None:
    results = [{"block_uid": "doc:0", "sentiment": "x" * 5_000, "summary": "y" * 5_000}]
    reason = parse(response(results), ["doc:0"]).invalid["doc:0"]
    assert len(reason) < 300
    assert "more" in reason


def test_truncated_response_keeps_complete_results() -> None:
    got = parse(response([ok("doc:0")], stop_reason="max_tokens"))
    assert got.truncated and got.mapping_failed
    assert set(got.valid) == {"doc:0"}
    assert got.unfinished == ["doc:1", "doc:2"]
    assert got.summary() == "max_tokens; 2 missing"


def test_summary_reads_like_a_report() -> None:
    results = [
        ok("doc:1"),
        ok("doc:1"),
        ok("x:1"),
        ok("x:2"),
    ]
    got = parse(response(results, stop_reason="max_tokens"), ["doc:0", "doc:1", "doc:2", "doc:3"])
    assert got.summary() == "max_tokens; 3 missing; 1 duplicate; 2 unknown uids"


def test_no_tool_call_is_a_payload_error_and_nothing_is_finished() -> None:
    resp = {"content": [{"type": "text", "text": "I can't"}], "stop_reason": "end_turn"}
    got = parse(resp)
    assert got.payload_error is not None and "end_turn" in got.payload_error
    assert got.unfinished == UIDS and got.missing == UIDS
    assert got.mapping_failed


def test_tool_call_with_another_name_is_ignored() -> None:
    resp = response([ok(u) for u in UIDS])
    resp["content"][0]["name"] = "something_else"
    assert parse(resp).payload_error is not None


def test_tool_input_not_an_object_is_a_payload_error() -> None:
    resp = response([])
    resp["content"][0]["input"] = ["not", "an", "object"]
    got = parse(resp)
    assert got.payload_error == "the tool input is not an object"
    assert got.unfinished == UIDS


def test_results_not_a_list_is_a_payload_error() -> None:
    got = parse(response({"doc:0": {"sentiment": "positive"}}))
    assert got.payload_error == "the tool input's results is not a list (dict)"
    resp = response([])
    del resp["content"][0]["input"]["results"]
    assert parse(resp).payload_error == "the tool input's results is not a list (missing)"


def test_results_sent_as_json_text_are_decoded() -> None:
    got = parse(response(json.dumps([ok(u) for u in UIDS])))
    assert set(got.valid) == set(UIDS)
    assert got.notes and not got.mapping_failed


def test_response_without_content_is_a_payload_error() -> None:
    got = parse({"type": "error", "error": {"type": "overloaded_error"}})
    assert got.payload_error == "the response has no content list"


def test_item_without_string_uid_cannot_be_mapped() -> None:
    results = [ok("doc:0"), ok("doc:1"), ok("doc:2"), {"sentiment": "positive"}, ok(7), "junk"]  # type: ignore[arg-type]  # malformed on purpose
    got = parse(response(results))
    assert got.unmappable == 3
    assert set(got.valid) == set(UIDS)
    assert got.mapping_failed
    assert "3 items without block_uid" in got.summary()


def test_items_that_are_all_unmappable_are_a_payload_error() -> None:
    got = parse(response(["a", "b", 3]))
    assert got.payload_error is not None
    assert got.unfinished == UIDS


def test_empty_results_means_all_missing() -> None:
    got = parse(response([]))
    assert got.missing == UIDS and got.payload_error is None and got.mapping_failed


def test_several_tool_calls_are_merged() -> None:
    resp = response([ok("doc:0")])
    resp["content"].append(
        {"type": "tool_use", "id": "toolu_2", "name": TOOL_NAME, "input": {"results": [ok("doc:1"), ok("doc:2")]}}
    )  # fmt: skip
    got = parse(resp)
    assert set(got.valid) == set(UIDS)
    assert got.notes


def test_repeated_expected_uid_counts_once() -> None:
    got = parse(response([ok("doc:0")]), ["doc:0", "doc:0"])
    assert got.expected == ["doc:0"] and got.unfinished == []


# Every expected uid ends in exactly one bucket, whatever the model does.

_item = st.one_of(
    st.builds(ok, st.sampled_from([*UIDS, "x:1", "x:2"])),
    st.fixed_dictionaries(
        {"block_uid": st.sampled_from(UIDS), "sentiment": st.sampled_from(["meh", 3])}
    ),
    st.just({"sentiment": "positive"}),
    st.integers(),
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_item, max_size=10), st.sampled_from(["tool_use", "max_tokens"]))
def test_every_expected_uid_lands_in_exactly_one_bucket(items: list[Any], stop: str) -> None:
    got = parse(response(items, stop_reason=stop))
    buckets = [set(got.valid), set(got.invalid), set(got.missing), set(got.duplicates)]
    assert sum(len(b) for b in buckets) == len(UIDS)
    assert set().union(*buckets) == set(UIDS)
    assert got.unfinished == [u for u in UIDS if u not in got.valid]
    assert not set(got.unknown) & set(UIDS)
    for reason in got.invalid.values():
        assert len(reason) < 300


def test_reason_code_per_block() -> None:
    got = parse(response([ok("doc:0"), {"block_uid": "doc:1", "sentiment": "meh"}]))
    assert got.reason_code("doc:0") is None
    assert got.reason_code("doc:1") == "invalid_value"
    assert got.reason_code("doc:2") == "missing_from_answer"


def test_reason_code_of_a_truncated_or_malformed_answer() -> None:
    assert (
        parse(response([], stop_reason="max_tokens"), ["doc:0"]).reason_code("doc:0") == "truncated"
    )
    assert parse(response("not json"), ["doc:0"]).reason_code("doc:0") == "malformed_answer"
    assert (
        parse(response([ok("doc:0"), ok("doc:0")]), ["doc:0"]).reason_code("doc:0")
        == "malformed_answer"
    )
    no_tool = {
        "type": "message",
        "content": [{"type": "text", "text": "no"}],
        "stop_reason": "end_turn",
    }
    assert parse(no_tool, ["doc:0"]).reason_code("doc:0") == "malformed_answer"
    # An invalid result stays the block's own fault even in a cut-off answer.
    got = parse(
        response([{"block_uid": "doc:0", "sentiment": 3}], stop_reason="max_tokens"), ["doc:0"]
    )
    assert got.reason_code("doc:0") == "invalid_value"


# --- short ids: mapped back through the call's recorded alias map only -------------------

ALIASES = {"b1": "doc:0", "b2": "doc:1", "b3": "doc:2"}


def parse_aliased(results: list[Any]) -> PackResults:
    return parse_results(response(results), UIDS, SPEC, ALIASES)


def test_aliases_map_back_to_block_uids_not_by_position() -> None:
    got = parse_aliased(
        [ok("b3", summary="two"), ok("b1", summary="zero"), ok("b2", summary="one")]
    )
    assert got.valid == {
        "doc:0": {"sentiment": "positive", "summary": "zero"},
        "doc:1": {"sentiment": "positive", "summary": "one"},
        "doc:2": {"sentiment": "positive", "summary": "two"},
    }
    assert not got.mapping_failed


def test_the_map_decides_not_the_alias_number() -> None:
    # A recorded map need not follow b1 = first block: the record is what counts.
    got = parse_results(
        response([ok("b1", summary="x")]), ["doc:0", "doc:1"], SPEC, {"b1": "doc:1", "b2": "doc:0"}
    )
    assert set(got.valid) == {"doc:1"} and got.missing == ["doc:0"]


def test_missing_alias_is_a_mapping_failure_reported_by_uid() -> None:
    got = parse_aliased([ok("b1"), ok("b3")])
    assert got.missing == ["doc:1"] and set(got.valid) == {"doc:0", "doc:2"}
    assert got.mapping_failed and got.reason_code("doc:1") == "missing_from_answer"


def test_duplicate_alias_discards_both_copies() -> None:
    got = parse_aliased([ok("b1"), ok("b2", summary="a"), ok("b2", summary="b"), ok("b3")])
    assert got.duplicates == ["doc:1"] and set(got.valid) == {"doc:0", "doc:2"}
    assert got.mapping_failed and got.reason_code("doc:1") == "malformed_answer"


def test_unknown_or_wrong_alias_is_a_mapping_failure_keeping_the_valid_part() -> None:
    got = parse_aliased([ok("b1"), ok("b2"), ok("b3"), ok("b4"), ok("B1"), ok(" b2")])
    assert got.unknown == ["b4", "B1", " b2"]
    assert set(got.valid) == set(UIDS) and got.mapping_failed
    assert got.summary() == "3 unknown uids"


def test_full_block_uid_is_unknown_when_aliases_were_sent() -> None:
    got = parse_aliased([ok("doc:0"), ok("b2"), ok("b3")])
    assert got.unknown == ["doc:0"] and got.missing == ["doc:0"]
    assert set(got.valid) == {"doc:1", "doc:2"} and got.mapping_failed


def test_alias_is_unknown_when_the_call_was_sent_with_full_uids() -> None:
    # A ledger row recorded without aliases (before short ids, or with them off).
    got = parse_results(response([ok("b1"), ok("doc:1"), ok("doc:2")]), UIDS, SPEC, None)
    assert got.unknown == ["b1"] and got.missing == ["doc:0"]


def test_an_alias_map_that_does_not_match_the_call_is_refused() -> None:
    for wrong in (
        {"b1": "doc:0", "b2": "doc:1"},
        {"b1": "doc:0", "b2": "doc:1", "b3": "doc:9"},
        {"b1": "doc:0", "b2": "doc:0", "b3": "doc:2"},
    ):
        with pytest.raises(ValueError, match="alias map"):
            parse_results(response([ok("b1")]), UIDS, SPEC, wrong)


@settings(max_examples=examples(60), deadline=None)
@given(
    order=st.permutations(list(range(3))),
    items=st.lists(st.sampled_from(["b1", "b2", "b3", "b4", "doc:0", 7]), max_size=8),
)
def test_every_block_lands_in_exactly_one_bucket_with_aliases(
    order: list[int], items: list[Any]
) -> None:
    aliases = dict(zip([f"b{i + 1}" for i in order], UIDS, strict=True))
    got = parse_results(
        response([ok(i) if isinstance(i, str) else {"block_uid": i} for i in items]),
        UIDS,
        SPEC,
        aliases,
    )
    for uid in UIDS:
        buckets = [uid in got.valid, uid in got.invalid, uid in got.missing, uid in got.duplicates]
        assert sum(buckets) == 1
    sent = [i for i in items if isinstance(i, str)]
    assert got.unknown == list(dict.fromkeys(i for i in sent if i not in aliases))
    for alias, uid in aliases.items():
        if sent.count(alias) == 1:
            assert uid in got.valid


# --- channels and stop reasons ---------------------------------------------------------

THINKING = {"type": "thinking", "thinking": "", "signature": "sig"}


def json_response(text: str, stop_reason: str = "end_turn") -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "stop_reason": stop_reason,
        "content": [THINKING, {"type": "text", "text": text}],
    }


def test_blocks_are_picked_by_type_after_thinking() -> None:
    resp = response([ok(u) for u in UIDS])
    resp["content"].insert(0, THINKING)
    got = parse(resp)
    assert set(got.valid) == set(UIDS) and not got.mapping_failed


def test_a_json_text_answer_maps_by_block_uid_like_a_tool_call() -> None:
    text = json.dumps({"results": [ok("doc:2"), ok("doc:0"), ok("doc:1", summary="fine")]})
    got = parse(json_response(text))
    assert set(got.valid) == set(UIDS) and not got.mapping_failed
    assert got.valid["doc:1"] == {"sentiment": "positive", "summary": "fine"}


def test_a_json_answer_keeps_the_same_uid_validation() -> None:
    text = json.dumps(
        {"results": [ok("doc:0"), ok("doc:0"), ok("doc:9"), ok("doc:2", summary="x" * 60)]}
    )
    got = parse(json_response(text))
    assert got.duplicates == ["doc:0"] and got.unknown == ["doc:9"]
    assert got.missing == ["doc:1"] and "doc:2" in got.invalid and got.mapping_failed


def test_a_json_answer_cut_off_keeps_its_complete_results() -> None:
    whole = json.dumps({"results": [ok("doc:0"), ok("doc:1"), ok("doc:2")]})
    cut = whole[: whole.index('"doc:2"') + 3]
    got = parse(json_response(cut, "max_tokens"))
    assert got.truncated and got.payload_error is None
    assert set(got.valid) == {"doc:0", "doc:1"} and got.missing == ["doc:2"]
    assert got.reason_code("doc:2") == "truncated"


def test_a_json_answer_cut_before_any_result_is_a_truncated_payload_error() -> None:
    got = parse(json_response('{"resu', "max_tokens"))
    assert got.truncated and got.payload_error is not None
    assert got.missing == UIDS


def test_text_that_is_not_json_is_a_payload_error() -> None:
    got = parse(json_response("Sure! Here are the results: ..."))
    assert got.payload_error is not None and "JSON" in got.payload_error
    assert got.reason_code("doc:0") == "malformed_answer"
    for text in ('["not", "an object"]', '{"results": {"doc:0": 1}}'):
        assert parse(json_response(text)).payload_error is not None


def test_the_context_window_stop_is_a_truncation() -> None:
    got = parse(response([ok("doc:0")], stop_reason="model_context_window_exceeded"))
    assert got.truncated and got.mapping_failed and got.reason_code("doc:1") == "truncated"


def test_a_refusal_fails_every_unfinished_block_as_refused_with_its_category() -> None:
    resp = json_response('{"results": [', "refusal")
    resp["stop_details"] = {"type": "refusal", "category": "cyber", "explanation": None}
    got = parse(resp)
    assert got.refusal == "cyber" and got.mapping_failed
    assert {got.reason_code(u) for u in UIDS} == {"refused"}
    assert got.summary().startswith("refused (cyber)")
    bare = parse(response([ok("doc:0")], stop_reason="refusal"))
    assert bare.refusal == "unspecified" and "doc:0" in bare.valid
    assert bare.reason_code("doc:1") == "refused" and bare.reason_code("doc:0") is None


def test_pause_turn_leaves_no_answer() -> None:
    got = parse(response([ok(u) for u in UIDS], stop_reason="pause_turn"))
    assert got.payload_error is not None and "pause_turn" in got.payload_error
    assert got.missing == UIDS and not got.valid


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.sampled_from([*UIDS, "x:9"]), max_size=6), st.data())
def test_a_json_answer_cut_anywhere_keeps_only_whole_results(
    order: list[str], data: st.DataObject
) -> None:
    whole = json.dumps({"results": [ok(u, summary='é, ] } " ok') for u in order]})
    cut = data.draw(st.integers(0, len(whole)))
    got = parse(json_response(whole[:cut], "max_tokens"))
    assert got.truncated and got.mapping_failed
    # Only results wholly inside the text, each mapped to its own uid, never invented.
    complete, at = [], 0
    for r in json.loads(whole)["results"]:
        at = whole.index(json.dumps(r), at) + len(json.dumps(r))
        if at <= cut:
            complete.append(r)
    single = {u for u in UIDS if [r["block_uid"] for r in complete].count(u) == 1}
    assert set(got.valid) == single
    buckets = [set(got.valid), set(got.invalid), set(got.missing), set(got.duplicates)]
    assert sorted(u for b in buckets for u in b) == sorted(UIDS)
