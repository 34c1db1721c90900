"""Trace any call without SQL: `calls RUN --show CALL_ID` and `Blockbatch.call`.

The ledger says what each row was for (``purpose``) and which API it went to; one call
prints in full: the request as sent (system prompt and tools elided unless ``--full``), the
raw response or the error. Never the API key.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from blockbatch.api import NotFound
from blockbatch.cli import EXIT_NOT_FOUND, amain
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions
from tests.conftest import Stack
from tests.helpers import REJECT_MARKER, TEST_BATCH_POLLS, extract_schema, marked_document


async def cli(s: Stack, capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = await amain(list(argv), client=s.client, settings=s.settings)
    out, err = capsys.readouterr()
    assert "sim-test-key" not in out + err
    return code, out, err


async def run(s: Stack, mode: str) -> str:
    doc = await s.bb.ingest_bytes(marked_document(8, {5}), name="t.md", fmt="markdown")
    schema_id = await s.bb.add_schema(extract_schema(instruction_words=200))
    # The probe's cost cap lifted: on 8 blocks it would leave no block to probe.
    options = RunOptions(
        pack_size=4,
        mode=mode,
        batch=TEST_BATCH_POLLS,
        quality=QualityOptions(probe_max_share=1),
    )
    run_id = await s.bb.start_run(doc, schema_id, options)
    async with s.worker():
        result = await s.bb.wait(run_id)
    assert result.blocks_failed == 1
    return run_id


async def test_show_a_call_its_request_response_and_error(bbstack: Stack, capsys: Any) -> None:
    bbstack.sim.scenario(reject_marker=REJECT_MARKER, batch={"processing_delay_s": 0.2})
    run_id = await run(bbstack, "sync")
    _, calls = await bbstack.bb.calls(run_id)
    # The quality probe's calls (a few blocks asked alone) are in the ledger too.
    # The simulator answered them, and the ledger says so (issue 28).
    assert {(c.purpose, c.provider, c.api) for c in calls} == {
        ("pack", "simulator", "messages"),
        ("warm_up", "simulator", "messages"),
        ("quality_probe", "simulator", "messages"),
    }
    ok = next(c for c in calls if c.status == "succeeded" and c.purpose == "pack")
    bad = next(c for c in calls if c.status == "failed" and c.http_status == 400)

    # The listing shows purpose and api, text and JSON.
    code, out, _ = await cli(bbstack, capsys, "calls", run_id)
    assert code == 0 and "PURPOSE" in out and "messages" in out
    code, out, _ = await cli(bbstack, capsys, "calls", run_id, "--json")
    assert {(c["purpose"], c["api"]) for c in json.loads(out)["calls"]} == {
        ("pack", "messages"),
        ("warm_up", "messages"),
        ("quality_probe", "messages"),
    }

    # One succeeded call: its blocks as sent, the raw tool_use answer, system elided.
    code, out, _ = await cli(bbstack, capsys, "calls", run_id, "--show", str(ok.call_id))
    assert code == 0
    assert f"call {ok.call_id} of run {run_id}: succeeded" in out
    host = bbstack.sim.base_url.removeprefix("http://")
    assert f"pack · provider simulator {host} (SIMULATED, not Claude) · api messages" in out
    assert "Paragraph 0 of the runbook" in out and '"tool_use"' in out
    # Blocks went out under short ids; the call reads back to its block_uids through its row.
    detail = await bbstack.bb.call(run_id, ok.call_id)
    ok_uids = detail.block_uids
    assert detail.block_aliases == {f"b{n}": u for n, u in enumerate(ok_uids, start=1)}
    assert f"blocks       b1 = {ok_uids[0]}, b2 = {ok_uids[1]}" in out
    assert '"block_uid": "b1"' in out and f'"block_uid": "{ok_uids[0]}"' not in out
    assert "elided; --full prints it whole" in out
    assert "restarting service" not in out.split("request (without")[0].split("system")[1]
    assert detail.system is not None and detail.system.elided
    assert len(detail.system.text) <= 201 and detail.system.length > 1000
    assert detail.system.value is None and detail.tools is not None and detail.tools.elided
    full_system = "You annotate blocks of an on-call handbook."
    assert out.count(full_system) == 1  # the beginning only

    code, out, _ = await cli(bbstack, capsys, "calls", run_id, "--show", str(ok.call_id), "--full")
    assert code == 0 and "elided" not in out
    whole = await bbstack.bb.call(run_id, ok.call_id, full=True)
    assert whole.system is not None and whole.tools is not None
    assert all(f"  {line}" in out for line in whole.system.text.splitlines())
    assert all(f"  {line}" in out for line in whole.tools.text.splitlines())
    assert whole.system.length == len(whole.system.text) and whole.system.value

    code, out, _ = await cli(bbstack, capsys, "calls", run_id, "--show", str(ok.call_id), "--json")
    data = json.loads(out)
    assert (data["purpose"], data["api"], data["provider"]) == ("pack", "messages", "simulator")
    assert data["system"]["elided"] and data["system"]["sha256"] == whole.system.sha256
    assert data["response"]["content"][0]["type"] == "tool_use"
    assert data["request"]["messages"] and "system" not in data["request"]
    assert data["input_tokens"] > 0 and data["workflow_id"]

    # The rejected call: http 400 and the API's message.
    code, out, _ = await cli(bbstack, capsys, "calls", run_id, "--show", str(bad.call_id))
    assert code == 0 and "http 400" in out and "refused because of the content" in out
    assert REJECT_MARKER in out  # the request as sent holds the guilty block

    # Unknown call, or a call id of no such run: one line, exit 3.
    code, _, err = await cli(bbstack, capsys, "calls", run_id, "--show", "999999")
    assert code == EXIT_NOT_FOUND and err.count("\n") == 1 and "no call 999999" in err
    code, _, err = await cli(bbstack, capsys, "calls", "nope", "--show", str(ok.call_id))
    assert code == EXIT_NOT_FOUND and err.count("\n") == 1
    with pytest.raises(NotFound):
        await bbstack.bb.call(run_id, 999999)

    # A batch-mode run's rows are batch requests; its calls are not the first run's.
    batch_id = await run(bbstack, "batch")
    _, batch_calls = await bbstack.bb.calls(batch_id)
    assert batch_calls and {(c.purpose, c.api, c.provider) for c in batch_calls} == {
        ("batch_request", "message_batches", "simulator")
    }
    code, out, _ = await cli(
        bbstack, capsys, "calls", batch_id, "--show", str(batch_calls[0].call_id), "--json"
    )
    assert code == 0 and json.loads(out)["custom_id"]
    code, _, err = await cli(
        bbstack, capsys, "calls", run_id, "--show", str(batch_calls[0].call_id)
    )
    assert code == EXIT_NOT_FOUND and f"no call {batch_calls[0].call_id}" in err
