"""The model sees a schema's fields in the order its author wrote them (real Postgres,
Temporal dev server, simulator): the stored schema keeps that order, the run's prompt lists
the fields in it, and a quote reads the schema as the run does."""

from __future__ import annotations

from typing import Any

from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions
from blockbatch.store import repo
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc

#: Not the order jsonb would keep (shorter keys first: n, id, summary, ...).
AUTHOR_ORDER = ["summary", "word_count", "id", "first_40_chars", "n"]


def schema() -> dict[str, Any]:
    base = extract_schema(instruction_words=200)
    fields = {
        "summary": {"type": "string", "maxLength": 200},
        "word_count": {"type": "integer", "minimum": 0},
        "id": {"type": "string"},
        "first_40_chars": {"type": "string", "maxLength": 40},
        "n": {"type": "integer"},
    }
    return {**base, "name": "field-order", "properties": fields}


async def test_a_run_prompts_with_the_fields_in_the_authors_order(bbstack: Stack) -> None:
    s = bbstack
    schema_id = await s.bb.add_schema(schema())
    async with s.pool.acquire() as conn:
        stored = await repo.schema_definition(conn, schema_id)
    assert list(stored["properties"]) == AUTHOR_ORDER

    doc = await s.bb.ingest_bytes(markdown_doc(6), name="order.md", fmt="markdown")
    async with s.worker():
        run_id = await s.bb.start_run(
            doc, schema_id, RunOptions(quality=QualityOptions(probe_rate=0))
        )
        result = await s.bb.wait(run_id)
    assert result.status == "completed"
    system = await s.pool.fetchval(
        """select p.system from llm_calls c join prompt_prefixes p on p.sha256 = c.prefix_sha256
           where c.run_id = $1 and c.purpose = 'pack' limit 1""",
        run_id,
    )
    text = "\n".join(block["text"] for block in system)
    where = [text.index(f"\n- {name} (") for name in AUTHOR_ORDER]
    assert where == sorted(where), text

    # The quote reads the schema as the run did: its answer keys find the run's answers.
    q = await s.bb.estimate(markdown_doc(6), schema(), fmt="markdown", name="order.md")
    assert any("all 6 blocks have an earlier run's answer" in note for note in q.notes), q.notes
