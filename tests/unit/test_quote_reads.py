"""The quote reads Postgres on one connection: tried once, and when it is out of reach each
figure that needed it says so."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import blockbatch.api.quote as quote_api
from blockbatch.core.registry import DEFAULT_MODEL, get_model
from blockbatch.runtime.settings import Settings

SCHEMA = {
    "name": "reads",
    "properties": {"summary": {"type": "string"}},
    "prompt_config": {"system_instructions": "Summarize.", "per_block_prompt": "Each block."},
}


def test_an_unreachable_postgres_is_tried_once_and_each_read_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tries: list[str] = []

    async def refused(url: str, *, timeout: float) -> Any:
        tries.append(url)
        raise OSError("connection refused")

    monkeypatch.setattr(quote_api, "connect_reading", refused)
    settings = Settings(database_url="postgresql://bb:secret@127.0.0.1:1/bb")
    q = asyncio.run(
        quote_api.estimate(
            b"# A\n\nSome text.\n",
            SCHEMA,
            fmt="markdown",
            settings=settings,
            count=False,
            model=get_model(DEFAULT_MODEL),
        )
    )
    assert len(tries) == 1
    reuse = [n for n in q.notes if n.startswith("reuse of earlier answers not checked")]
    history = [n for n in q.notes if n.startswith("no earlier runs read")]
    assert len(reuse) == len(history) == 1
    assert "127.0.0.1:1" in history[0] and "secret" not in history[0]
    assert q.calibration is None


def test_without_history_the_quote_opens_no_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    async def never(url: str, *, timeout: float) -> Any:
        raise AssertionError("a quote without history reads no Postgres")

    monkeypatch.setattr(quote_api, "connect_reading", never)
    q = asyncio.run(
        quote_api.estimate(
            b"# A\n\nSome text.\n",
            SCHEMA,
            fmt="markdown",
            settings=Settings(),
            count=False,
            history=False,
            model=get_model(DEFAULT_MODEL),
        )
    )
    assert q.blocks == 2


def test_repeated_blocks_are_quoted_once_as_the_run_asks_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # plan_run asks the same type and content once per run; its copies take that answer.
    async def never(url: str, *, timeout: float) -> Any:
        raise AssertionError("a quote without history reads no Postgres")

    monkeypatch.setattr(quote_api, "connect_reading", never)
    text = b"".join(b"Paragraph %d says something.\n\nThe same line.\n\n" % i for i in range(5))
    q = asyncio.run(
        quote_api.estimate(
            text,
            SCHEMA,
            fmt="markdown",
            settings=Settings(),
            count=False,
            history=False,
            model=get_model(DEFAULT_MODEL),
        )
    )
    assert q.blocks == 6  # five distinct paragraphs and one repeated four times
    assert any(n.startswith("4 blocks repeat an earlier block's") for n in q.notes), q.notes
