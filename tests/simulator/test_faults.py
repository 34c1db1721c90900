"""Model misbehaviour on demand: truncation, skipped, duplicate, unknown, bled, malformed."""

from __future__ import annotations

from blockbatch.core.prompt import alias_map, build_request
from blockbatch.core.results import parse_results
from blockbatch.core.schema import load_schema
from blockbatch.simulator.scenario import Faults, Quality, Scenario
from blockbatch.simulator.testing import make_blocks, pack_params, results_by_uid, tool_input

BLOCKS = make_blocks(20)
UIDS = [b["block_uid"] for b in BLOCKS]


async def needed_output(client) -> int:
    return (await client.messages.create(**pack_params(BLOCKS))).usage.output_tokens


async def test_partial_truncation_keeps_only_complete_results(sim, client):
    needed = await needed_output(client)
    message = await client.messages.create(**pack_params(BLOCKS, max_tokens=needed // 2))
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == needed // 2
    results = tool_input(message)["results"]
    assert 0 < len(results) < len(BLOCKS)
    full = results_by_uid(await client.messages.create(**pack_params(BLOCKS)))
    assert all(r == full[r["block_uid"]] for r in results)


async def test_empty_truncation_sends_empty_input(sim, client):
    sim.scenario = Scenario(truncation_mode="empty")
    needed = await needed_output(client)
    message = await client.messages.create(**pack_params(BLOCKS, max_tokens=needed - 1))
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == needed - 1
    assert tool_input(message) == {}


async def test_exact_fit_is_not_truncated(client):
    needed = await needed_output(client)
    message = await client.messages.create(**pack_params(BLOCKS, max_tokens=needed))
    assert message.stop_reason == "tool_use"
    assert len(tool_input(message)["results"]) == len(BLOCKS)


async def test_truncate_fault_stops_at_half_the_needed_output(sim, client):
    needed = await needed_output(client)
    sim.scenario = Scenario(faults=Faults(truncate=1.0))
    message = await client.messages.create(**pack_params(BLOCKS))
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == needed // 2
    assert len(tool_input(message)["results"]) < len(BLOCKS)


async def test_skip_duplicate_and_unknown_uid_faults_appear(sim, client):
    sim.scenario = Scenario(
        seed=5, faults=Faults(skip_block=0.2, duplicate_uid=0.2, unknown_uid=0.2)
    )
    results = tool_input(await client.messages.create(**pack_params(BLOCKS)))["results"]
    returned = [r["block_uid"] for r in results]
    assert set(UIDS) - set(returned), "some block was skipped or renamed"
    assert len(returned) != len(set(returned)), "some uid appears twice"
    assert [uid for uid in returned if uid not in UIDS], "some uid is unknown"
    faults = sim.state.stats.snapshot()["faults"]
    assert {"skip_block", "duplicate_uid", "unknown_uid"} <= set(faults)
    assert sim.state.stats.log[-1]["faults"]


async def test_bleed_takes_values_from_the_neighbouring_block(sim, client):
    clean = results_by_uid(await client.messages.create(**pack_params(BLOCKS)))
    sim.scenario = Scenario(faults=Faults(bleed=1.0))
    bled = results_by_uid(await client.messages.create(**pack_params(BLOCKS)))
    assert bled["doc:0"]["first_40_chars"] == clean["doc:1"]["first_40_chars"]
    assert bled["doc:19"]["first_40_chars"] == clean["doc:18"]["first_40_chars"]


async def test_malformed_tool_input_does_not_match_the_schema(sim, client):
    sim.scenario = Scenario(seed=1, faults=Faults(malformed_tool_input=1.0))
    seen = set()
    for start in range(12):
        payload = tool_input(await client.messages.create(**pack_params(BLOCKS[start:])))
        results = payload.get("results")
        if results == "oops":
            seen.add("not-a-list")
        elif results is None:
            seen.add("no-results-key")
        else:
            assert any("word_count" not in r for r in results)
            seen.add("missing-field")
    assert len(seen) >= 2


async def test_always_skip_and_always_malformed_uids(sim, client):
    sim.scenario = Scenario(always_skip_uids=["doc:3"], always_malformed_uids=["doc:4"])
    results = results_by_uid(await client.messages.create(**pack_params(BLOCKS)))
    assert "doc:3" not in results
    assert not isinstance(results["doc:4"]["word_count"], int)
    assert isinstance(results["doc:5"]["word_count"], int)


async def test_quality_model_skips_more_in_bigger_packs(sim, client):
    sim.scenario = Scenario(
        seed=2, quality=Quality(enabled=True, free_blocks=10, skip_per_extra_block=0.01)
    )
    small = await client.messages.create(**pack_params(make_blocks(10)))
    assert len(tool_input(small)["results"]) == 10
    big_blocks = make_blocks(80)
    big = await client.messages.create(**pack_params(big_blocks))
    assert len(tool_input(big)["results"]) < len(big_blocks)


async def test_faults_are_reproducible_from_the_seed(sim, client):
    scenario = Scenario(seed=9, faults=Faults(skip_block=0.3))
    sim.scenario = scenario
    first = tool_input(await client.messages.create(**pack_params(BLOCKS)))
    sim.state.reset()
    again = tool_input(await client.messages.create(**pack_params(BLOCKS)))
    assert [r["block_uid"] for r in first["results"]] == [r["block_uid"] for r in again["results"]]
    sim.scenario = scenario.model_copy(update={"seed": 10})
    sim.state.reset()
    other = tool_input(await client.messages.create(**pack_params(BLOCKS)))
    assert [r["block_uid"] for r in other["results"]] != [r["block_uid"] for r in first["results"]]


async def test_faults_on_short_ids_are_mapping_failures_after_the_recorded_map(sim, client):
    """A blockbatch request with short ids: the simulator echoes b1, b2, … and its skipped,
    duplicated and invented ids come back as missing, duplicate and unknown block_uids."""
    spec = load_schema(
        {
            "properties": {"word_count": {"type": "integer"}, "summary": {"type": "string"}},
            "prompt_config": {"system_instructions": "Annotate."},
        }
    )
    aliases = alias_map(UIDS)
    request = build_request(spec, BLOCKS, max_tokens=8000, aliases=aliases)
    clean = (await client.messages.create(**request)).model_dump(mode="json")
    parsed = parse_results(clean, UIDS, spec, aliases)
    assert set(parsed.valid) == set(UIDS) and not parsed.mapping_failed
    assert parsed.valid["doc:3"]["word_count"] == len(BLOCKS[3]["block_content"].split())

    # The draws hang on the request body: take the first seed that commits all three faults.
    for seed in range(1, 40):
        sim.scenario = Scenario(
            seed=seed,
            faults=Faults(skip_block=0.2, duplicate_uid=0.2, unknown_uid=0.2),
            always_skip_contents=[BLOCKS[7]["block_content"]],
        )
        message = await client.messages.create(**request)
        parsed = parse_results(message.model_dump(mode="json"), UIDS, spec, aliases)
        if parsed.duplicates and parsed.unknown and len(parsed.missing) > 1:
            break
    ids = [r["block_uid"] for r in tool_input(message)["results"]]
    assert all(i in aliases or i.startswith("unknown-") for i in ids)
    assert parsed.missing and parsed.duplicates and parsed.unknown
    assert "doc:7" in parsed.missing  # picked by its content, whatever its id on the wire
    assert parsed.mapping_failed and set(parsed.valid) < set(UIDS)


async def test_a_strict_tool_suppresses_only_the_faults_its_schema_forbids(sim, client):
    """Contract §2: structured outputs conform to the schema, so wrongly typed or misshaped
    input cannot happen; skipped, duplicated and unknown ids can, and still do."""
    sim.scenario = Scenario(
        seed=5,
        always_malformed_uids=["doc:4"],
        faults=Faults(malformed_tool_input=1.0, unknown_uid=0.2, duplicate_uid=0.2),
    )
    fields = {
        "word_count": {"type": "integer"},
        "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
    }
    params = pack_params(BLOCKS, model="claude-haiku-5-5", fields=fields)
    schema = params["tools"][0]["input_schema"]
    schema["additionalProperties"] = False
    schema["properties"]["results"]["items"]["additionalProperties"] = False
    params["tools"][0]["strict"] = True
    results = tool_input(await client.messages.create(**params))["results"]
    assert all(isinstance(r["word_count"], int) for r in results)
    returned = [r["block_uid"] for r in results]
    assert any(uid not in UIDS for uid in returned)
    assert len(returned) != len(set(returned))
    faults = sim.state.stats.log[-1]["faults"]
    assert {"always_malformed_suppressed", "malformed_tool_input_suppressed"} <= set(faults)
    assert not {"always_malformed", "malformed_tool_input"} & set(faults)
