"""Thinking in the ledger and the run totals, the Models API's facts kept in Postgres, and
retired models refused before anything is created (real Postgres, Temporal, simulator)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from blockbatch.core.ingest import parse_document
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.registry import RetiredModelError, Usage
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema
from blockbatch.report import baseline_cost
from blockbatch.runtime.models_api import ModelFacts
from blockbatch.store import ledger, model_facts, repo, runs
from blockbatch.store.ledger import Origin
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc

PREFIX = ("0" * 64, [{"type": "text", "text": "system"}], [{"name": "tool"}])


async def _run(pool: asyncpg.Pool, model: str = "claude-opus-5-5") -> str:
    data = markdown_doc(3)
    async with pool.acquire() as conn:
        doc = await repo.save_document(
            conn, "d.md", "markdown", data, parse_document(data, "markdown")
        )
        schema = await repo.save_schema(conn, load_schema(extract_schema(200)))
        return await repo.create_run(conn, doc, schema, RunOptions(model=model))


async def _answered(
    pool: asyncpg.Pool, run_id: str, path: str, usage: Usage, stop_reason: str = "tool_use"
) -> None:
    async with pool.acquire() as conn:
        call_id = await ledger.open_call(
            conn,
            run_id=run_id,
            pack_path=path,
            pack_attempt=1,
            block_uids=["a", "b"],
            model="claude-opus-5-5",
            prefix=PREFIX,
            request={"messages": []},
            origin=Origin(f"run-{run_id}/pack-{path}", "wf", "1", 1),
            est_output_tokens=100,
        )
        assert call_id is not None
        message = {"stop_reason": stop_reason, "content": []}
        answer = await ledger.record_answer(conn, call_id, message, None, usage, 0.01, 5)
        assert answer is not None and answer.thinking_tokens == usage.thinking_tokens


async def test_thinking_is_recorded_learned_per_call_and_in_the_run_totals(
    pool: asyncpg.Pool,
) -> None:
    run_id = await _run(pool)
    await _answered(
        pool, run_id, "0", Usage(input_tokens=10, output_tokens=1_150, thinking_tokens=1_000)
    )
    await _answered(
        pool, run_id, "1", Usage(input_tokens=10, output_tokens=1_250, thinking_tokens=1_100)
    )
    # Cut off at max_tokens: its thinking counts, its answers say only "more".
    await _answered(
        pool,
        run_id,
        "2",
        Usage(input_tokens=10, output_tokens=2_000, thinking_tokens=1_900),
        stop_reason="max_tokens",
    )
    async with pool.acquire() as conn:
        seen = await ledger.observed_output(conn, run_id)
        assert seen is not None
        assert (seen.calls, seen.blocks) == (2, 4)
        assert seen.ratio == pytest.approx((150 + 150) / 200)  # answers, thinking left out
        assert seen.thinking == pytest.approx((1_000 + 1_100 + 1_900) / 3)
        result = await runs.close_run(conn, run_id, "completed", None)
    assert result.model == "claude-opus-5-5" and not result.priced_from_configuration
    assert result.thinking_tokens == 4_000
    assert result.output_tokens == 4_400


async def test_the_models_api_facts_are_kept_and_read_again_only_when_old(
    pool: asyncpg.Pool,
) -> None:
    class Models:
        asked = 0

        async def retrieve(self, model_id: str, **_: Any) -> Any:
            Models.asked += 1
            from blockbatch.send.sdk import anthropic

            return anthropic.types.ModelInfo.construct(
                id=model_id,
                type="model",
                lifecycle="active",
                max_input_tokens=300_000,
                max_tokens=32_000,
                display_name="x",
                created_at="2026-10-07T00:00:00Z",
            )

    class Client:
        models = Models()

    reader = ModelFacts(Client())  # type: ignore[arg-type]  # stands in for the SDK client
    async with pool.acquire() as conn:
        first = await reader.refresh(conn, "claude-haiku-5-5")
        again = await reader.refresh(conn, "claude-haiku-5-5")
        kept = await model_facts.fresh(conn, "claude-haiku-5-5", 60)
    assert first == again == kept and kept is not None
    assert kept["max_input_tokens"] == 300_000
    assert Models.asked == 1  # the kept answer is fresh: not read again


async def test_a_run_context_takes_the_facts_kept_for_its_model(
    pool: asyncpg.Pool,
) -> None:
    """A run started before its models were kept (no ``runs.models``): the registry with
    the facts kept in Postgres, read without asking the API."""
    run_id = await _run(pool, "claude-haiku-5-5")
    async with pool.acquire() as conn:
        before = await runs.load_run_context(conn, run_id)
        await model_facts.save(
            conn,
            "claude-haiku-5-5",
            {
                "id": "claude-haiku-5-5",
                "lifecycle": "active",
                "max_input_tokens": 250_000,
                "max_tokens": 16_000,
            },
        )
        after = await runs.load_run_context(conn, run_id)
    assert before.model.context_window == 1_000_000
    assert (after.model.context_window, after.model.max_output_tokens) == (250_000, 16_000)
    assert after.plan_limits().model_max_output == 16_000


async def _nothing_created(s: Stack) -> None:
    for table in ("runs", "llm_calls"):
        assert await s.pool.fetchval(f"select count(*) from {table}") == 0
    assert s.sim.stats()["requests"].get("POST /v1/messages", 0) == 0


async def test_a_retired_model_is_refused_before_anything_is_created(bbstack: Stack) -> None:
    s = bbstack
    data = markdown_doc(3)
    doc = await s.bb.ingest_blocks(
        data, parse_document(data, "markdown"), name="d.md", fmt="markdown"
    )
    schema_id = await s.bb.add_schema(extract_schema(200))
    with pytest.raises(RetiredModelError, match="use claude-opus-5-5"):
        await s.bb.start_run(
            doc, schema_id, RunOptions(model="claude-opus-4-1"), task_queue=s.task_queue
        )
    await _nothing_created(s)
    # The Models API says a registry model is retired: refused the same way.
    await model_facts.save(
        s.pool,
        "claude-haiku-4-5",
        {"id": "claude-haiku-4-5", "lifecycle": "retired", "retires_at": "2026-11-20T00:00:00Z"},
    )
    with pytest.raises(RetiredModelError, match="claude-haiku-4-5 was retired on 2026-11-20"):
        await s.bb.start_run(
            doc, schema_id, RunOptions(model="claude-haiku-4-5"), task_queue=s.task_queue
        )
    with pytest.raises(RetiredModelError, match="use claude-haiku-5-5"):
        await s.bb.estimate(
            data, extract_schema(200), RunOptions(model="claude-haiku-4-5"), fmt="markdown"
        )
    await _nothing_created(s)


async def test_a_runs_models_are_resolved_once_at_its_start_and_read_from_it(
    bbstack: Stack,
) -> None:
    """Issue 36: the front door resolves the run's model (and its probe's) once, keeps it
    with the run, and the workers read it there: facts that change later, and a worker
    that cannot reach the Models API, do not change the run's model."""
    s = bbstack
    await model_facts.save(
        s.pool,
        "claude-sonnet-5-5",
        {"id": "claude-sonnet-5-5", "lifecycle": "active", "max_tokens": 20_000},
    )
    data = markdown_doc(3)
    doc = await s.bb.ingest_blocks(
        data, parse_document(data, "markdown"), name="d.md", fmt="markdown"
    )
    schema_id = await s.bb.add_schema(extract_schema(200))
    options = RunOptions(
        model="claude-sonnet-5-5", quality=QualityOptions(probe_model="claude-haiku-5-5")
    )
    # No worker polls this task queue: the run is only started, never served.
    run_id = await s.bb.start_run(doc, schema_id, options, task_queue="nobody-polls")
    kept = await s.pool.fetchval("select models from runs where run_id = $1", run_id)
    assert sorted(kept) == ["claude-haiku-5-5", "claude-sonnet-5-5"]
    assert kept["claude-sonnet-5-5"]["max_output_tokens"] == 20_000
    # Later facts change nothing for this run: it keeps what it started with.
    await model_facts.save(
        s.pool,
        "claude-sonnet-5-5",
        {"id": "claude-sonnet-5-5", "lifecycle": "active", "max_tokens": 8_000},
    )
    async with s.pool.acquire() as conn:
        ctx = await runs.load_run_context(conn, run_id)
        probe = await runs.probe_context(conn, ctx)
    assert ctx.model.max_output_tokens == 20_000
    assert probe.model.id == "claude-haiku-5-5"
    await s.bb.handle(run_id).terminate("test done")


async def test_a_model_checked_before_the_start_is_not_resolved_again(
    bbstack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's `run` checks the model before it stores the document, then starts the
    run with the model it resolved: the start resolves nothing again."""
    s = bbstack
    data = markdown_doc(3)
    doc = await s.bb.ingest_blocks(
        data, parse_document(data, "markdown"), name="d.md", fmt="markdown"
    )
    schema_id = await s.bb.add_schema(extract_schema(200))
    checked = await s.bb.run_model("claude-sonnet-5-5")
    asked: list[str] = []

    async def resolved_again(name: str) -> Any:
        asked.append(name)
        raise AssertionError(f"{name} resolved again")

    monkeypatch.setattr(s.bb, "run_model", resolved_again)
    run_id = await s.bb.start_run(
        doc,
        schema_id,
        RunOptions(model="claude-sonnet-5-5"),
        task_queue="nobody-polls",
        model=checked,
    )
    assert asked == []
    kept = await s.pool.fetchval("select models from runs where run_id = $1", run_id)
    assert sorted(kept) == ["claude-sonnet-5-5"]
    await s.bb.handle(run_id).terminate("test done")


async def test_a_run_reads_the_models_api_once_from_start_to_summary(bbstack: Stack) -> None:
    """Issue 36: the Models API is read once per run: at its start, for the run's model
    (its facts then kept a day); the workers, the quality probe and the summary read
    what the run kept."""
    s = bbstack
    model = "claude-sonnet-5-5"
    await s.pool.execute("delete from model_facts where model_id = $1", model)
    doc = await s.bb.ingest_bytes(markdown_doc(12), name="doc.md", fmt="markdown")
    schema_id = await s.bb.add_schema(extract_schema(200))

    def reads() -> int:
        counted = s.sim.stats()["requests"].get("GET /v1/models/{model_id}", {})
        return sum(counted.values())

    before = reads()
    run_id = await s.bb.start_run(
        doc,
        schema_id,
        RunOptions(model=model, pack_size=4, quality=QualityOptions(probe_model=model)),
    )
    async with s.worker():
        result = await s.bb.wait(run_id)
    await baseline_cost(s.pool, run_id)
    assert result.status == "completed" and result.blocks_ai_complete == 12
    assert reads() - before == 1
