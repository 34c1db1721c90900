"""Evidence through the simulated Claude and the real SDK: a schema that asks for evidence
gets, on every answer channel, quotes the block holds (at least 99% of the values of the
sample documents grounded), and the ``bad_quote`` fault's quotes are caught every time."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from blockbatch.core.answer import CallShape
from blockbatch.core.evidence import GroundingCount, ground, ungrounded
from blockbatch.core.ingest import parse_document
from blockbatch.core.prompt import alias_map, build_request, shape_for
from blockbatch.core.results import parse_results
from blockbatch.core.schema import SchemaSpec, load_schema
from blockbatch.simulator.scenario import Faults, Scenario

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
#: A model with a forced tool and structured outputs (strict_tool, tool, auto_tool), and
#: one that rejects a forced tool (json).
TOOL_MODEL = "claude-haiku-5-5"
JSON_MODEL = "claude-sonnet-5-5"
PACK = 12


def spec_with_evidence(name: str) -> SchemaSpec:
    data = json.loads((SAMPLES / f"{name}.json").read_text())
    data["prompt_config"]["evidence"] = True
    return load_schema(data)


def sample_blocks() -> list[dict[str, str]]:
    blocks = []
    for doc in ("handbook.md", "adversarial.md"):
        for n, b in enumerate(parse_document((SAMPLES / doc).read_bytes(), "markdown")):
            blocks.append(
                {
                    "block_uid": f"{doc}:{n}",
                    "block_type": b.block_type,
                    "block_content": b.block_content,
                }
            )
    return blocks


def shape_of(spec: SchemaSpec, channel: str) -> tuple[str, CallShape]:
    if channel == "json":
        return JSON_MODEL, shape_for(spec, JSON_MODEL)
    return TOOL_MODEL, replace(shape_for(spec, TOOL_MODEL), channel=channel)  # type: ignore[arg-type]


async def answer_all(
    client: Any, spec: SchemaSpec, channel: str, blocks: list[dict[str, str]]
) -> dict[str, dict[str, Any]]:
    """Every block's grounded evidence, answered in packs of PACK with short ids."""
    model, shape = shape_of(spec, channel)
    text = {b["block_uid"]: b["block_content"] for b in blocks}
    evidence: dict[str, dict[str, Any]] = {}
    for at in range(0, len(blocks), PACK):
        pack = blocks[at : at + PACK]
        uids = [b["block_uid"] for b in pack]
        aliases = alias_map(uids)
        request = build_request(
            spec, pack, max_tokens=16_000, model=model, shape=shape, aliases=aliases
        )
        message = await client.messages.create(**request)
        parsed = parse_results(message.model_dump(), uids, spec, aliases)
        assert sorted(parsed.valid) == sorted(uids), parsed.summary()
        for uid, overlay in parsed.valid.items():
            evidence[uid] = ground(parsed.evidence[uid], overlay, text[uid])
    return evidence


@pytest.mark.parametrize("channel", ["strict_tool", "tool", "json", "auto_tool"])
@pytest.mark.parametrize("schema", ["starter", "extract"])
async def test_simulated_answers_quote_their_blocks(client, channel, schema):
    spec = spec_with_evidence(schema)
    blocks = sample_blocks()
    evidence = await answer_all(client, spec, channel, blocks)
    count = GroundingCount()
    for e in evidence.values():
        count.add(e)
    assert count.values >= len(blocks) * len(spec.required)
    assert count.rate is not None and count.rate >= 0.99, count
    # Quotes joined across a line break match once whitespace is normalised, and their
    # span covers the block's own characters.
    assert count.normalised > 0
    text = {b["block_uid"]: b["block_content"] for b in blocks}
    for uid, fields in evidence.items():
        for e in fields.values():
            if e["match"] == "exact":
                assert text[uid][e["start"] : e["end"]] == e["quote"]
            elif e["match"] == "normalised":
                covered = text[uid][e["start"] : e["end"]]
                assert " ".join(covered.split()).lower() == " ".join(e["quote"].split()).lower()


async def test_injected_bad_quotes_are_all_caught(sim, client):
    sim.scenario = Scenario(faults=Faults(bad_quote=0.2))
    spec = spec_with_evidence("extract")
    blocks = sample_blocks()
    evidence = await answer_all(client, spec, "strict_tool", blocks)
    injected = sim.state.stats.faults["bad_quote"]
    assert injected > 10
    missing = sum(len(ungrounded(e)) for e in evidence.values())
    assert missing == injected
    for fields in evidence.values():
        for e in fields.values():
            if e["match"] == "missing":
                assert e["reason"] == "quote_not_found"


async def test_a_schema_without_evidence_sends_the_same_request(client):
    data = json.loads((SAMPLES / "starter.json").read_text())
    plain = load_schema(data)
    off = load_schema({**data, "prompt_config": {**data["prompt_config"], "evidence": False}})
    blocks = sample_blocks()[:3]
    assert build_request(plain, blocks, max_tokens=100) == build_request(
        off, blocks, max_tokens=100
    )
    assert plain.content_hash() == off.content_hash()
    on = spec_with_evidence("starter")
    assert on.content_hash() != plain.content_hash()
