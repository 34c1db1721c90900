"""Escalation's pure rules: a second packing with new neighbours and places, and which
blocks go to the escalation model."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from blockbatch.core.escalation import ProbedBlock, escalation_reason, second_order, vs_probe
from blockbatch.core.schema import load_schema


def layout(sizes: list[int]) -> list[list[str]]:
    packs, n = [], 0
    for size in sizes:
        packs.append([f"b{n + i}" for i in range(size)])
        n += size
    return packs


@given(st.lists(st.integers(min_value=2, max_value=40), min_size=1, max_size=30))
def test_no_first_pass_neighbours_meet_again(sizes: list[int]) -> None:
    packs = layout(sizes)
    order = second_order(packs)
    flat = [u for p in packs for u in p]
    assert sorted(order) == sorted(flat)  # every block once
    if len(flat) < 2 * max(3, len(packs)):
        return
    neighbours = {frozenset(pair) for p in packs for pair in itertools.pairwise(p)}
    assert not any(frozenset(pair) in neighbours for pair in itertools.pairwise(order))


def test_few_blocks_keep_their_place_and_the_first_places_are_spread() -> None:
    packs = layout([20] * 20)
    order = second_order(packs)
    second = [order[i : i + 20] for i in range(0, len(order), 20)]
    before = {u: k for p in packs for k, u in enumerate(p)}
    after = {u: k for p in second for k, u in enumerate(p)}
    same = sum(before[u] == after[u] for u in before)
    assert same < len(before) * 0.1
    firsts = [p[0] for p in packs]
    assert sorted(after[u] for u in firsts) == list(range(20))


SPEC = load_schema(
    {
        "name": "t",
        "properties": {
            "topic": {"type": "string", "enum": ["a", "b"]},
            "word_count": {"type": "integer"},
        },
        "prompt_config": {"system_instructions": "x", "per_block_prompt": "y"},
    }
)


def test_which_blocks_are_escalated_and_why() -> None:
    answer = {"topic": "a", "word_count": 3}
    assert escalation_reason(SPEC, "ai_complete", answer, dict(answer)) is None
    assert (
        escalation_reason(SPEC, "ai_complete", answer, {"topic": "b", "word_count": 3})
        == "disagrees"
    )
    assert escalation_reason(SPEC, "ai_complete", answer, None) == "no_second_answer"
    assert escalation_reason(SPEC, "failed", None, None) == "failed"
    assert escalation_reason(SPEC, "failed", None, None, first_reason="refused") == "refused"


def test_the_probe_sample_is_compared_before_and_after_as_the_probe_compares() -> None:
    right = {"topic": "a", "word_count": 3}
    wrong = {"topic": "b", "word_count": 3}
    blocks = [
        ProbedBlock(right, agreed=True, answer=right),  # kept, right
        ProbedBlock(right, agreed=False, answer=right),  # escalated: now right
        ProbedBlock(right, agreed=False, answer=wrong),  # kept, still wrong
        # the probe's rules: an enum compared after normalising, ints exactly
        ProbedBlock(right, agreed=False, answer={"topic": " A ", "word_count": 3}),
        ProbedBlock(right, agreed=True, answer={"topic": "a", "word_count": 4}),
        ProbedBlock(right, agreed=True, answer=None),  # no answer now: not agreeing
    ]
    v = vs_probe(SPEC, blocks, probe_model="claude-sonnet-5-5", run_model=False)
    assert v is not None and v.probe_model == "claude-sonnet-5-5" and not v.run_model
    assert (v.before.samples, v.before.agreeing) == (6, 3)
    assert (v.after.samples, v.after.agreeing) == (6, 3)
    assert v.before.rate == 0.5 and v.after.low is not None and v.after.low < 0.5
    assert vs_probe(SPEC, [], probe_model="m", run_model=True) is None
