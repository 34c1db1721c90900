"""The Python API for programs and notebooks: llm_batch / allm_batch, and UI findability."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from blockbatch.api import (
    AllItemsFailed,
    Blockbatch,
    SimulatedAnswers,
    allm_batch,
    llm_batch,
    llm_query_batched,
)
from blockbatch.api.items import items_to_blocks
from blockbatch.cli import amain
from blockbatch.core.run_types import RunOptions
from blockbatch.simulator.questions import WORDS
from tests.conftest import Stack
from tests.helpers import REJECT_MARKER, block_content, extract_schema, markdown_doc
from tests.waiting import until

ITEMS: list[Any] = [
    "Page the primary on call when the queue backs up.",
    {"text": "Rotate certificates before they expire.", "id": 7, "team": "ledger"},
    "   ",
    {"text": "Escalate severity one incidents to the incident commander.", "block_type": "rule"},
    "Write the postmortem within five working days.",
    {"text": "Hand the pager over on Tuesday morning."},
]


async def test_allm_batch_returns_one_result_per_item_in_order(bbstack: Stack) -> None:
    data, blocks, _ = items_to_blocks(ITEMS)
    doc = await bbstack.bb.ingest_blocks(data, blocks, name="items", fmt="items")
    # The 5th item: block 3.
    bbstack.sim.scenario(always_skip_contents=[await block_content(bbstack.pool, f"{doc}:3")])
    out = await allm_batch(
        ITEMS,
        extract_schema(instruction_words=200),
        bb=bbstack.bb,
        with_worker=True,
        pack_size=2,
        max_block_attempts=1,
    )
    assert out.run.status == "completed_with_failures"  # block 3 failed
    assert len(out) == len(ITEMS) == len(out.values)
    assert [r.index for r in out] == list(range(len(ITEMS)))
    assert [r.ok for r in out] == [True, True, False, True, False, True]
    assert out[2].status == "skipped" and "empty" in (out[2].error or "")
    assert out[2].block_uid is None
    assert out[4].status == "failed" and "missing" in (out[4].error or "")
    assert out[4].block_uid == f"{doc}:3" and out[4].value is None
    for item, result in zip(ITEMS, out, strict=True):
        if result.ok:
            text = item if isinstance(item, str) else item["text"]
            assert result.value is not None and result.error is None
            assert result.value["word_count"] == len(text.split())
            assert result.value["first_40_chars"] == text[:40]
    assert [e.index for e in out.errors] == [2, 4]
    meta = await bbstack.pool.fetchval(
        "select metadata from blocks where block_uid = $1", f"{doc}:1"
    )
    assert meta == {"id": 7, "team": "ledger", "item_index": 1}


async def test_llm_batch_blocking_form_with_in_process_worker(bbstack: Stack) -> None:
    # The blocking form makes its own connections from settings, as a script would.
    out = await asyncio.to_thread(
        llm_batch,
        ["One two three.", "Four five."],
        extract_schema(instruction_words=100),
        settings=bbstack.settings,
        with_worker=True,
    )
    assert [r.ok for r in out] == [True, True]
    assert [v["word_count"] for v in out.values if v] == [3, 2]
    assert out.run.calls == 1 and out.run_id


async def test_llm_batch_answers_questions_in_plain_text_in_input_order(bbstack: Stack) -> None:
    # No schema: each prompt is a question; the blocking form, as a script calls it.
    out = await asyncio.to_thread(
        llm_query_batched,
        ["What is 2+2?", "Name a colour."],
        settings=bbstack.settings,
        with_worker=True,
    )
    assert out.all_succeeded and out.error_count == 0
    assert out.values[0] == "4" and out.values[1] in WORDS["colour"]["en"]
    assert [r.index for r in out.successes] == [0, 1]
    # Both questions shared one call, and each carries its share of it.
    calls = await bbstack.pool.fetch(
        "select block_uids, cost_usd::float8 as cost from llm_calls where run_id = $1 "
        "and purpose = 'pack'",
        out.run_id,
    )
    assert [sorted(c["block_uids"]) for c in calls] == [sorted(r.block_uid or "" for r in out)]
    assert all(
        r.usage.calls == 1 and r.usage.cost_usd > 0 and r.usage.input_tokens > 0 for r in out
    )
    assert abs(sum(r.usage.cost_usd for r in out) - out.run.cost_usd) < 1e-6
    assert sum(r.usage.output_tokens for r in out) == pytest.approx(out.run.output_tokens, abs=2)


async def test_questions_keep_their_own_instructions_and_contexts_in_one_pack(
    bbstack: Stack,
) -> None:
    questions = [
        "Answer only in French: name a colour.",
        "Answer in English: name a fruit.",
        "Summarise in English.",
        "Summarise in English.",
        "",
        "What is 6*7?",
        "Name an animal in German.",
        "Answer in Spanish: name a fruit.",
    ]
    contexts = [
        None,
        None,
        "The storm reached the harbour at dawn.",
        "The harvest was late this year.",
        None,
        None,
        None,
        None,
    ]
    # The model leaves one question out of its answer: a mapping failure, the pack halves.
    bbstack.sim.scenario(always_skip_contents=["Name an animal in German."])
    out = await allm_batch(
        questions, contexts, bb=bbstack.bb, with_worker=True, max_parallel=3, max_block_attempts=1
    )
    assert out.run.status == "completed_with_failures" and out.run.split_events >= 1
    sent = await bbstack.pool.fetchval(
        "select cardinality(block_uids) from llm_calls where run_id = $1 and purpose = 'pack' "
        "order by call_id limit 1",
        out.run_id,
    )
    assert sent == 7  # every question with text went in the first call
    answers = out.values
    assert answers[0] in WORDS["colour"]["fr"]  # French asked, a colour asked
    assert answers[1] in WORDS["fruit"]["en"]  # not French: the first one's rule stayed there
    assert answers[7] in WORDS["fruit"]["es"]
    assert answers[2] == (
        "Answer: Summarise in English. (from the context: The storm reached the harbour at dawn.)"
    )
    assert answers[3] == (
        "Answer: Summarise in English. (from the context: The harvest was late this year.)"
    )
    assert answers[5] == "42"
    assert (out[4].status, out[4].reason) == ("skipped", "skipped")
    assert out[6].status == "failed" and out[6].value is None
    assert out[6].reason == "missing_from_answer" and out[6].usage.calls >= 2
    assert [r.index for r in out.errors] == [4, 6] and out.error_count == 2
    assert "missing_from_answer" in out.error_report()
    settings = await bbstack.pool.fetchval(
        "select settings from runs where run_id = $1", out.run_id
    )
    assert settings["max_concurrent_packs"] == 3
    assert abs(sum(r.usage.cost_usd for r in out) - out.run.cost_usd) < 1e-6


async def test_llm_batch_raises_with_every_error_when_every_question_failed(
    bbstack: Stack,
) -> None:
    bbstack.sim.scenario(reject_marker=REJECT_MARKER)
    questions = [f"{REJECT_MARKER} question {n}?" for n in range(3)]
    with pytest.raises(AllItemsFailed) as caught:
        await allm_batch(questions, bb=bbstack.bb, with_worker=True)
    exc = caught.value
    assert [e.index for e in exc.errors] == [0, 1, 2]
    assert all(e.status == "failed" and e.error and e.reason for e in exc.errors)
    assert sum(exc.reasons.values()) == 3 and exc.result.run.status == "failed"
    # Bad input is refused before anything is stored.
    runs = await bbstack.pool.fetchval("select count(*) from runs")
    with pytest.raises(ValueError, match="1 context for 2 prompts"):
        await allm_batch(["a?", "b?"], ["only one"], bb=bbstack.bb)
    with pytest.raises(TypeError, match="wrap a single one in a list"):
        await allm_batch("What is 2+2?", bb=bbstack.bb)
    assert await bbstack.pool.fetchval("select count(*) from runs") == runs


async def test_packs_and_halves_are_findable_in_the_ui_by_run_id(bbstack: Stack) -> None:
    bbstack.sim.scenario(faults={"truncate": 0.5}, seed=3)
    bb: Blockbatch = bbstack.bb
    doc = await bb.ingest_bytes(markdown_doc(24), name="ui.md", fmt="markdown")
    schema_id = await bb.add_schema(extract_schema(instruction_words=200))
    run_id = await bb.start_run(doc, schema_id, RunOptions(pack_size=8))
    async with bbstack.worker():
        result = await bb.wait(run_id)
    assert result.split_events > 0
    expected = {f"run-{run_id}"} | {
        f"run-{run_id}/pack-{p}" for p in await _pack_paths(bbstack, run_id)
    }

    async def listed() -> dict[str, Any] | None:  # visibility is eventually consistent
        found = {
            w.id: w async for w in bbstack.client.list_workflows(f'BlockbatchRunId = "{run_id}"')
        }
        return found if set(found) >= expected else None

    found = await until(listed, f"every workflow of run {run_id} listed", interval=0.1)
    assert set(found) == expected
    assert any("." in wid.rsplit("pack-", 1)[-1] for wid in found)  # halves are listed too
    for wid, w in found.items():
        attrs = {k.name: v for k, v in ((p.key, p.value) for p in w.typed_search_attributes)}
        assert attrs["BlockbatchDocument"] == doc and attrs["BlockbatchSchema"] == schema_id
        if "/pack-" in wid:
            assert attrs["BlockbatchPack"] == wid.rsplit("pack-", 1)[1]
    run = await bbstack.client.get_workflow_handle(f"run-{run_id}").describe()
    assert "ui.md" in (await run.static_summary() or "")
    assert f'BlockbatchRunId = "{run_id}"' in (await run.static_details() or "")


async def _pack_paths(s: Stack, run_id: str) -> set[str]:
    rows = await s.pool.fetch(
        """select pack_path from llm_calls where run_id = $1 and purpose = 'pack'
           union select pack_path from split_events where run_id = $1""",
        run_id,
    )
    return {r["pack_path"] for r in rows}


async def test_cli_runs_in_process_with_a_given_client(bbstack: Stack, capsys: Any) -> None:
    code = await amain(["list", "--json"], client=bbstack.client, settings=bbstack.settings)
    assert code == 0 and capsys.readouterr().out.strip() == "[]"


async def test_llm_batch_without_a_worker_warns_and_gives_up_after_its_timeout(
    bbstack: Stack,
) -> None:
    # bbstack's task queue has no worker: the run would wait forever, silently.
    from blockbatch.api import NoWorker, RunTimedOut

    with (
        pytest.warns(NoWorker, match="no worker is polling task queue .*with_worker=True"),
        pytest.raises(RunTimedOut, match=r"did not finish within 1\.5 s") as err,
    ):
        await allm_batch(["What is 2+2?"], bb=bbstack.bb, timeout=1.5)
    run_id = err.value.run_id
    assert f"`blockbatch cancel {run_id}`" in str(err.value)
    assert (await bbstack.bb.run(run_id)).active  # it keeps waiting for a worker
    await bbstack.client.get_workflow_handle(f"run-{run_id}").terminate("test done")


async def test_an_in_process_worker_run_that_times_out_is_cancelled(bbstack: Stack) -> None:
    # Its private task queue dies with the call: a run left behind would never end.
    from blockbatch.api import RunTimedOut

    bbstack.sim.scenario(speed_factor=1.0, latency={"ttft_ms": 4000})
    with pytest.raises(RunTimedOut, match="cancelled") as err:
        await allm_batch(
            ["What is 2+2?", "Name a colour."], bb=bbstack.bb, with_worker=True, timeout=1.0
        )
    info = await bbstack.bb.run(err.value.run_id)
    assert not info.active


async def test_llm_batch_warns_once_per_call_when_its_answers_are_simulated(
    bbstack: Stack,
) -> None:
    # The second call reuses the first's answers: still the simulator's, still said.
    questions = ["Which colour is the sky?", "How many legs has a spider?"]
    for _ in range(2):
        with pytest.warns(SimulatedAnswers) as caught:
            out = await allm_batch(questions, bb=bbstack.bb, with_worker=True)
        said = [w for w in caught if issubclass(w.category, SimulatedAnswers)]
        assert len(said) == 1, [str(w.message) for w in said]
        assert out.simulated and "the simulator at" in str(said[0].message)
        assert out.run_id in str(said[0].message)
    assert out.run.blocks_reused == 2 and out.run.calls == 0
