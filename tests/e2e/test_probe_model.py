"""The quality probe on another model (``QualityOptions.probe_model``, ``--probe-model``):
a cheap run's packed answers measured against a strong model's alone answers, on the
simulator's per-model quality model."""

from __future__ import annotations

import pytest

from blockbatch.api.errors import BadRequest
from blockbatch.core.agreement import compare_properties
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.registry import UnknownModelError
from blockbatch.core.run_types import RunOptions
from blockbatch.simulator.content import block_result
from blockbatch.simulator.prompt import Block
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc

HAIKU, SONNET = "claude-haiku-5-5", "claude-sonnet-5-5"


async def test_the_probe_asks_its_blocks_alone_on_the_probe_model(bbstack: Stack) -> None:
    # Haiku is wrong about a third of its blocks alone and more in packs of 16, always
    # the same way about the same block; Sonnet is never wrong.
    bbstack.sim.scenario(
        seed=4,
        quality={
            "enabled": True,
            "free_blocks": 4,
            "skip_per_extra_block": 0,
            "bleed_per_extra_block": 0,
            "models": {HAIKU: {"wrong_alone": 0.3, "wrong_per_extra_block": 0.02}, SONNET: {}},
        },
    )
    schema = extract_schema(200)
    doc = await bbstack.bb.ingest_bytes(markdown_doc(64), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(schema)
    with pytest.raises((UnknownModelError, BadRequest), match="claude-nonesuch"):
        await bbstack.bb.start_run(
            doc,
            schema_id,
            RunOptions(model=HAIKU, quality=QualityOptions(probe_model="claude-nonesuch")),
        )
    # A gate that never trips: its per-pack samples are not capped by cost (Sonnet alone
    # costs far more per block than Haiku in packs).
    quality = QualityOptions(probe_model=SONNET, min_agreement=0.01, probe_rate=0.1)
    run_id = await bbstack.bb.start_run(
        doc, schema_id, RunOptions(model=HAIKU, pack_size=16, quality=quality)
    )
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert result.status == "completed"
    calls = await bbstack.pool.fetch(
        "select purpose, array_agg(distinct model) as models from llm_calls "
        "where run_id = $1 and status = 'succeeded' group by purpose",
        run_id,
    )
    by_purpose = {r["purpose"]: r["models"] for r in calls}
    assert by_purpose["pack"] == [HAIKU] and by_purpose["quality_probe"] == [SONNET]
    samples = await bbstack.pool.fetch(
        """select s.agrees, s.packed, s.single, b.block_type, b.block_content
           from quality_samples s join blocks b using (block_uid)
           where s.run_id = $1 and s.status = 'compared'""",
        run_id,
    )
    assert len(samples) >= 8
    properties = schema["properties"]
    disagreeing = 0
    for s in samples:
        truth = block_result(Block("x", s["block_type"], s["block_content"]), properties)
        truth = {k: v for k, v in truth.items() if k in s["single"]}
        # Sonnet alone is the truth here, so a sample agrees exactly when Haiku was right.
        assert s["single"] == truth
        right = all(v.agree for v in compare_properties(properties, s["packed"], truth))
        assert s["agrees"] == right
        disagreeing += not right
    assert disagreeing > 0
    q = result.quality
    assert q is not None and q.probe_model == SONNET and f"(alone on {SONNET})" in q.text
