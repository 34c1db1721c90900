"""`run --mode batch` warns when batch is expected to cost more than sync; `--mode cheapest`
runs the mode the quote expects to cost less (blockbatch/cli/run.py ``choose_mode``)."""

from __future__ import annotations

import importlib
import io
from typing import Any

import pytest

from blockbatch.cli.commands import build_parser
from blockbatch.cli.console import Console
from blockbatch.cli.quote import cheaper_mode, print_quote
from blockbatch.cli.session import Session
from blockbatch.core.quote import quote, quote_context
from blockbatch.core.quote_tokens import PromptTokens
from blockbatch.core.registry import get_model
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema
from blockbatch.runtime.settings import Settings
from tests.helpers import extract_schema

MODEL = get_model("claude-haiku-5-5")
#: The module, not the package's ``run`` function of the same name.
cli_run: Any = importlib.import_module("blockbatch.cli.run")
#: Where both `estimate` and `run --mode` get their quote (``quote_of``).
cli_quote: Any = importlib.import_module("blockbatch.cli.quote")


def a_quote(
    blocks: int, pack_size: int, hits: tuple[int, int] | None = None, prefix: int = 5_000
) -> Any:
    """A quote of ``blocks`` blocks of 100 tokens; ``hits``: measured batch cache hits."""
    ctx = quote_context(
        RunOptions(model=MODEL.id, pack_size=pack_size, quality={"probe_rate": 0.0}),
        load_schema(extract_schema(1500)),
        MODEL,
    )
    tokens = PromptTokens(
        source="count_tokens",
        prefix=prefix,
        per_call=60,
        blocks=100 * blocks,
        warm_up=prefix + 90,
        requests=4,
    )
    return quote(ctx, [100] * blocks, tokens, document="d.md", batch_hits=hits)


def args_for(*argv: str) -> Any:
    return build_parser().parse_args(["run", "doc.md", "--schema", "s.json", *argv])


def session() -> tuple[Session, io.StringIO]:
    err = io.StringIO()
    return Session(Settings(), Console(out=io.StringIO(), err=err)), err


@pytest.mark.asyncio
async def test_mode_cheapest_runs_the_mode_the_quote_expects_to_cost_less(monkeypatch) -> None:
    args = args_for("--mode", "cheapest")
    assert cli_run._options(args).mode == "sync"  # a placeholder until the quote chooses
    for q in (a_quote(400, 20), a_quote(40, 2, hits=(0, 100), prefix=60_000)):

        async def fake_estimate(*_: Any, q: Any = q, **__: Any) -> Any:
            return q

        monkeypatch.setattr(cli_quote, "estimate", fake_estimate)
        s, err = session()
        chosen = await cli_run.choose_mode(args, s, cli_run._options(args), [])
        expected = "batch" if q.batch.cost_usd < q.sync.cost_usd else "sync"
        assert chosen.mode == cheaper_mode(q) == expected
        assert f"--mode cheapest runs {expected}" in err.getvalue()
    # Batch is cheaper with many blocks a request; with a long prompt, two blocks a request
    # and no cache hits measured, sync (reading the cache every call) is.
    assert cheaper_mode(a_quote(400, 20)) == "batch"
    assert cheaper_mode(a_quote(40, 2, hits=(0, 100), prefix=60_000)) == "sync"


@pytest.mark.asyncio
async def test_mode_batch_warns_with_the_figures_when_batch_costs_more(monkeypatch) -> None:
    dear = a_quote(40, 2, hits=(0, 100), prefix=60_000)
    assert dear.batch.cost_usd > dear.sync.cost_usd

    async def fake_estimate(*_: Any, **__: Any) -> Any:
        return dear

    monkeypatch.setattr(cli_quote, "estimate", fake_estimate)
    s, err = session()
    options = await cli_run.choose_mode(
        args_for("--mode", "batch"), s, RunOptions(mode="batch"), []
    )
    assert options.mode == "batch"  # the user's choice stands; they were told
    said = err.getvalue()
    assert "batch is expected to cost MORE than sync" in said
    assert f"${dear.batch.cost_usd:.4f}" in said and f"${dear.sync.cost_usd:.4f}" in said
    # No warning when batch is the cheaper.
    cheap = a_quote(400, 20)

    async def cheap_estimate(*_: Any, **__: Any) -> Any:
        return cheap

    monkeypatch.setattr(cli_quote, "estimate", cheap_estimate)
    s, err = session()
    await cli_run.choose_mode(args_for("--mode", "batch"), s, RunOptions(mode="batch"), [])
    assert "MORE" not in err.getvalue()


@pytest.mark.asyncio
async def test_run_mode_cheapest_quotes_the_file_as_estimate_does(monkeypatch) -> None:
    """``run --mode cheapest`` chooses by the quote ``estimate`` would show for the same
    file, read the same way."""
    asked: list[dict[str, Any]] = []

    async def recording_estimate(*args: Any, **kwargs: Any) -> Any:
        asked.append({"args": args, **kwargs})
        return a_quote(400, 20)

    monkeypatch.setattr(cli_quote, "estimate", recording_estimate)
    reading = ["--format", "jsonl", "--text-field", "body", "--skip-empty", "--mode", "cheapest"]
    s, _ = session()
    estimate_args = build_parser().parse_args(
        ["estimate", "doc.md", "--schema", "s.json", *reading]
    )
    await cli_run.cmd_estimate(estimate_args, s)
    run_args = args_for(*reading)
    await cli_run.choose_mode(run_args, s, cli_run._options(run_args), [])
    by_estimate, by_run = asked
    assert by_run.pop("blocks") == [] and by_estimate.pop("blocks") is None
    assert by_estimate == by_run
    assert by_run["fmt"] == "jsonl" and by_run["text_field"] == "body" and by_run["skip_empty"]


def test_the_quote_shows_the_batch_spread_and_says_when_batch_costs_more() -> None:
    out = io.StringIO()
    q = a_quote(400, 20)
    print_quote(Console(out=out, err=io.StringIO()), q)
    text = out.getvalue()
    assert "ALL HITS" in text and "1 ahead" in text
    assert "cache hits are best effort: 95% expected (assumed until measured)" in text
    assert f"${q.batch.min_cost_usd:.4f}" in text and f"${q.batch.max_cost_usd:.4f}" in text
    dear = io.StringIO()
    print_quote(Console(out=dear, err=io.StringIO()), a_quote(40, 2, hits=(0, 100), prefix=60_000))
    assert "batch is expected to cost MORE than sync" in dear.getvalue()
