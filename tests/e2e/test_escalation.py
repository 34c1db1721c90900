"""Escalation (``Blockbatch.escalate``, docs/ESCALATION.md) through the real stack: a cheap
run's doubtful blocks end with the strong model's answer, and no block is paid twice on
one model."""

from __future__ import annotations

import json

import pytest

from blockbatch.api.errors import BadRequest, RunStillActive
from blockbatch.core.agreement import compare_properties
from blockbatch.core.models import QualityOptions, RunOptions
from blockbatch.simulator.content import block_result
from blockbatch.simulator.prompt import Block
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`

HAIKU, SONNET = "claude-haiku-5-5", "claude-sonnet-5-5"


def _json(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else json.loads(str(value))


async def test_escalation_replaces_doubtful_answers_and_pays_once_per_model(
    bbstack: Stack,
) -> None:
    # Haiku is wrong about many blocks, more so in packs (so two packings often differ);
    # Sonnet is never wrong: every escalated block ends at the truth.
    bbstack.sim.scenario(
        seed=3,
        quality={
            "enabled": True,
            "free_blocks": 2,
            "skip_per_extra_block": 0,
            "bleed_per_extra_block": 0,
            "models": {HAIKU: {"wrong_alone": 0.05, "wrong_per_extra_block": 0.03}, SONNET: {}},
        },
    )
    schema = extract_schema(200)
    properties = schema["properties"]
    doc = await bbstack.bb.ingest_bytes(markdown_doc(48), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(schema)
    run_id = await bbstack.bb.start_run(
        doc,
        schema_id,
        RunOptions(
            model=HAIKU,
            pack_size=12,
            reuse_answers=False,
            quality=QualityOptions(probe_rate=0.0, probe_minimum=0),
        ),
    )
    async with bbstack.worker():
        first = await bbstack.bb.wait(run_id)
        assert first.status == "completed"
        with pytest.raises(BadRequest, match="stronger model"):
            await bbstack.bb.escalate(run_id, HAIKU)
        await bbstack.bb.escalate(run_id, SONNET)
        result = await bbstack.bb.wait_escalation(run_id)
        with pytest.raises((BadRequest, RunStillActive), match="escalated already"):
            await bbstack.bb.escalate(run_id, SONNET)

    assert result.status == "completed"
    esc = result.escalation
    assert esc is not None and esc.model == SONNET and esc.status == "done"
    assert esc.blocks == 48 and esc.compared == 48
    assert esc.sent_up == esc.escalated > 0 and esc.kept == 48 - esc.sent_up
    assert esc.second_pass_calls == 4 and esc.escalation_calls == esc.escalated
    assert esc.second_pass_cost_usd > 0 and esc.escalation_cost_usd > 0

    rows = await bbstack.pool.fetch(
        """select e.status, e.reason, e.first_answer, e.second_answer, e.escalation_answer,
                  e.escalation_call_id, o.staging, o.call_id, o.status as overlay_status,
                  b.block_type, b.block_content
           from escalations e join overlays o using (run_id, block_uid)
           join blocks b using (block_uid) where e.run_id = $1""",
        run_id,
    )
    for r in rows:
        assert r["overlay_status"] == "ai_complete"
        if r["status"] == "escalated":
            truth = block_result(Block("x", r["block_type"], r["block_content"]), properties)
            # The overlay holds Sonnet's answer, which is the truth here.
            assert _json(r["staging"]) == _json(r["escalation_answer"])
            assert all(f.agree for f in compare_properties(properties, _json(r["staging"]), truth))
            assert r["call_id"] == r["escalation_call_id"]
        else:
            assert r["status"] == "kept" and r["reason"] is None
            assert _json(r["staging"]) == _json(r["first_answer"])

    # Paid once per model: every block is in one answered call per purpose, each purpose
    # on its own model.
    paid = await bbstack.pool.fetch(
        """select uid, model, purpose, count(*) as n
           from llm_calls c, unnest(c.block_uids) as uid
           where c.run_id = $1 and c.status = 'succeeded' group by 1, 2, 3""",
        run_id,
    )
    assert {(p["purpose"], p["model"]) for p in paid} == {
        ("pack", HAIKU),
        ("second_pass", HAIKU),
        ("escalation", SONNET),
    }
    assert all(p["n"] == 1 for p in paid)
    per_model = await bbstack.pool.fetch(
        """select uid, model, count(*) as n from llm_calls c, unnest(c.block_uids) as uid
           where c.run_id = $1 and c.status = 'succeeded' group by 1, 2
           having count(*) > case when model = $2 then 2 else 1 end""",
        run_id,
        HAIKU,
    )
    assert per_model == []

    # The second pass read the prefix the first pass cached (same system prompt and tool).
    prefixes = await bbstack.pool.fetch(
        """select distinct prefix_sha256 from llm_calls
           where run_id = $1 and model = $2 and status = 'succeeded'""",
        run_id,
        HAIKU,
    )
    assert len(prefixes) == 1
    read = await bbstack.pool.fetchval(
        """select sum(cache_read_input_tokens) from llm_calls
           where run_id = $1 and purpose = 'second_pass'""",
        run_id,
    )
    assert read > 0


async def test_starter_run_escalate_to_follows_the_run_then_the_escalation(
    bbstack: Stack, cli: Cli
) -> None:
    bbstack.sim.scenario(
        seed=5,
        quality={
            "enabled": True,
            "free_blocks": 2,
            "skip_per_extra_block": 0,
            "bleed_per_extra_block": 0,
            "models": {HAIKU: {"wrong_alone": 0.05, "wrong_per_extra_block": 0.03}, SONNET: {}},
        },
    )
    doc, schema = cli.doc(24), cli.schema()
    args = ("--schema", schema, "--model", HAIKU, "--pack-size", "8")
    quiet = ("--set", "quality.probe_rate=0", "--set", "quality.probe_minimum=0")
    async with bbstack.worker():
        bad = await cli("run", doc, *args, "--escalate-to", "claude-nonesuch")
        assert bad.code != 0 and "claude-nonesuch" in bad.out + bad.err
        out = await cli("run", doc, *args, *quiet, "--escalate-to", SONNET)
        assert out.code == 0, out.out + out.err
        run_id = out.run_id
        again = await cli("escalate", run_id, "--to", SONNET)
    assert f"escalating run {run_id} to {SONNET}" in out.out
    assert f"escalated    to {SONNET}: 24 of 24 blocks compared in a second packing" in out.out
    assert "escalation $ second pass 3 calls $" in out.out
    assert again.code != 0 and "escalated already" in again.out + again.err
    esc = await bbstack.bb.escalation(run_id)
    assert esc is not None and esc.escalation_calls == esc.escalated == esc.sent_up
