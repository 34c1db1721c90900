"""Inputs a user gets wrong, through the Python API on the real stack (issue 33 points 6-9):
a misspelt or retired model, empty rows, a UTF-16 CSV; nothing is stored for a refusal."""

from __future__ import annotations

import asyncio
import codecs
import sys
import warnings
from pathlib import Path

import pytest

from blockbatch.api.errors import EmptyRecordsSkipped
from blockbatch.core.ingest import IngestError
from blockbatch.core.registry import RetiredModelError, UnknownModelError
from tests.conftest import ROOT, Stack
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`

HELPDESK = "id,text\nT-1,printer on fire\nT-2,\nT-3,cannot log in\nT-4,  \n"


async def _count(s: Stack, table: str) -> int:
    return int(await s.pool.fetchval(f"select count(*) from {table}"))


async def test_empty_rows_are_refused_unless_skipped_and_then_listed(bbstack: Stack) -> None:
    with pytest.raises(IngestError) as err:
        await bbstack.bb.ingest_bytes(HELPDESK.encode(), name="h.csv", fmt="csv")
    # The Python API names its own parameter, not the CLI's flag.
    assert "lines 3, 5 have an empty 'text'" in str(err.value)
    assert "skip_empty=True" in str(err.value) and "--skip-empty" not in str(err.value)
    assert await _count(bbstack, "documents") == 0

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", EmptyRecordsSkipped)
        doc = await bbstack.bb.ingest_bytes(
            HELPDESK.encode(), name="h.csv", fmt="csv", skip_empty=True
        )
    assert [str(w.message) for w in caught if w.category is EmptyRecordsSkipped] == [
        "skipped 2 records with an empty text: lines 3, 5"
    ]
    rows = await bbstack.pool.fetch(
        "select block_content, metadata from blocks where document_id = $1 order by block_index",
        doc,
    )
    assert [r["block_content"] for r in rows] == ["printer on fire", "cannot log in"]


async def test_a_utf16_csv_is_stored_as_its_text(bbstack: Stack) -> None:
    data = codecs.BOM_UTF16_LE + "ticket,text\nT-1,Café au lait ☕\n".encode("utf-16-le")
    doc = await bbstack.bb.ingest_bytes(data, name="u16.csv", fmt="csv")
    content = await bbstack.pool.fetchval(
        "select block_content from blocks where document_id = $1", doc
    )
    assert content == "Café au lait ☕"


async def test_a_misspelt_model_is_answered_with_the_name_meant(bbstack: Stack) -> None:
    with pytest.raises(UnknownModelError) as err:
        await bbstack.bb.run_model("claude-sonet-5-5")
    assert "did you mean claude-sonnet-5-5?" in str(err.value)
    assert "BLOCKBATCH_MODEL_PRICES" not in str(err.value)


async def test_a_retired_claude_3_5_id_is_refused_with_its_date_and_replacement(
    bbstack: Stack,
) -> None:
    with pytest.raises(RetiredModelError) as err:
        await bbstack.bb.run_model("claude-3-5-sonnet-20241022")
    assert str(err.value).startswith("claude-3-5-sonnet-20241022 was retired on 2025-10-22")
    assert "use claude-sonnet-5-5" in str(err.value)


async def _run(cli: Cli, *argv: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cli.tmp,  # another directory than the repository's
        env=cli.env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_a_hint_names_the_program_the_user_typed(cli: Cli) -> None:
    script = Path(sys.executable).parent / "blockbatch"
    code, err = await _run(cli, str(script), "status", "no-such-run")
    assert code == 3
    assert err.strip() == "error: no run 'no-such-run': list runs with `blockbatch list`"
    starter = str(ROOT / "starter.py")
    code, err = await _run(cli, sys.executable, starter, "status", "no-such-run")
    assert code == 3
    assert f"list runs with `python {starter} list`" in err
