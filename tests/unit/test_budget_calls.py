"""``CallPath.budgeted``: what a budgeted run's pack call reserves and the ``max_tokens`` it is
sent with, from what the run's ledger has learned (the ledger reads are stood in for)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from activities.calls import CallPath
from blockbatch.core.budget import (
    AGAIN_OUTPUT_HEADROOM,
    Spread,
    expected_output_tokens,
    pack_worst_case,
)
from blockbatch.core.context import RunContext
from blockbatch.core.registry import get_model
from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import load_schema
from blockbatch.store import ledger


def _ctx(**options: Any) -> RunContext:
    spec = load_schema(
        {
            "properties": {"summary": {"type": "string"}},
            "prompt_config": {
                "system_instructions": "Summarise. " * 800,
                "per_block_prompt": "One sentence.",
            },
        }
    )
    opts = RunOptions.model_validate({"model": "claude-haiku-5-5", "pack_size": 10, **options})
    return RunContext("r", "d", "s", opts, spec, get_model(opts.model))


@pytest.fixture
def learned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose answers wrote half their estimate, steadily, its prefix cached 10 s ago."""

    async def observed(conn: Any, run_id: str) -> ledger.Observed:
        return ledger.Observed(5, 50, 0.5, None, Spread(5, 1.0, 0.02))

    async def cached_s(conn: Any, run_id: str) -> float:
        return 10.0

    monkeypatch.setattr(ledger, "observed_output", observed)
    monkeypatch.setattr(ledger, "prefix_cached_s", cached_s)


async def test_a_budgeted_call_is_sent_with_the_max_tokens_its_reservation_pays_for(
    learned: None,
) -> None:
    ctx = _ctx(max_cost_usd=1.0)
    planned = ctx.pack([300] * 10)
    path = CallPath(pool=None, sender=None)  # type: ignore[arg-type]  # budgeted uses neither
    sent, reserved = await path.budgeted(None, ctx, planned)
    assert reserved is not None
    assert sent.max_tokens == reserved.max_tokens < planned.max_tokens
    assert reserved.expected_usd < reserved.usd < reserved.worst_usd
    assert reserved.worst_usd == pytest.approx(pack_worst_case(ctx, planned))


async def test_a_later_attempt_may_write_several_times_its_expected_output(
    learned: None,
) -> None:
    ctx = _ctx(max_cost_usd=1.0)
    first = ctx.pack([300] * 10)
    planned = ctx.pack([300] * 10, attempt=2)  # after a truncated answer: the whole budget
    path = CallPath(pool=None, sender=None)  # type: ignore[arg-type]  # budgeted uses neither
    sent_first, _ = await path.budgeted(None, ctx, first)
    sent, reserved = await path.budgeted(None, ctx, planned, again=True)
    assert reserved is not None
    expected = expected_output_tokens(ctx, planned, 0.5, None)
    # Not cut where the first attempt was: four times the expected output, within the plan.
    assert (
        sent.max_tokens
        == reserved.max_tokens
        == min(planned.max_tokens, math.ceil(expected * AGAIN_OUTPUT_HEADROOM))
    )
    assert sent_first.max_tokens < sent.max_tokens
    # And it reserves all of it (the prefix read: the cache is warm).
    assert reserved.usd == pytest.approx(
        pack_worst_case(
            ctx, dataclasses.replace(planned, max_tokens=sent.max_tokens), prefix_read=True
        )
    )


async def test_a_run_without_a_budget_sends_the_pack_as_planned(learned: None) -> None:
    ctx = _ctx()
    planned = ctx.pack([300] * 10)
    path = CallPath(pool=None, sender=None)  # type: ignore[arg-type]  # budgeted uses neither
    assert await path.budgeted(None, ctx, planned) == (planned, None)
