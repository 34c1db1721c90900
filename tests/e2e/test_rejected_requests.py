"""A request Claude refuses because of one block's content fails that block alone.

The simulator refuses (400 ``invalid_request_error``) any request holding a block with a
marker string; the pack is halved like an overflow until the block is alone, in sync and
batch mode, and every other block of the document ends done.
"""

from __future__ import annotations

import pytest

from blockbatch.core.run_types import RunOptions
from tests.conftest import Stack
from tests.helpers import REJECT_MARKER, TEST_BATCH_POLLS, extract_schema, marked_document


@pytest.mark.parametrize("mode", ["sync", "batch"])
async def test_a_request_rejected_for_one_block_fails_that_block_alone(
    bbstack: Stack, mode: str
) -> None:
    bbstack.sim.scenario(reject_marker=REJECT_MARKER, batch={"processing_delay_s": 0.2})
    doc = await bbstack.bb.ingest_bytes(marked_document(16, {11}), name="r.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(instruction_words=200))
    options = RunOptions(
        pack_size=8,
        mode=mode,
        batch=TEST_BATCH_POLLS,
    )
    run_id = await bbstack.bb.start_run(doc, schema_id, options)
    async with bbstack.worker():
        result = await bbstack.bb.wait(run_id)
    assert (result.status, result.blocks_ai_complete, result.blocks_failed) == (
        "completed_with_failures",
        15,
        1,
    )
    failed = await bbstack.pool.fetch(
        "select block_index, last_error from overlays where run_id = $1 and status = 'failed'",
        run_id,
    )
    assert [r["block_index"] for r in failed] == [11]
    assert "refused because of the content" in failed[0]["last_error"]
