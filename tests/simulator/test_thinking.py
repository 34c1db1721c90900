"""The simulator's rule for whether a request thinks (contract §3), model by model."""

from __future__ import annotations

from typing import Any

import pytest

from blockbatch.core.registry import get_model
from blockbatch.simulator.engine import thinking_tokens
from blockbatch.simulator.faults import Dice
from blockbatch.simulator.prompt import Block, Prompt
from blockbatch.simulator.scenario import Scenario, Thinking

TOOL = {"name": "t", "input_schema": {"type": "object"}}
PROMPT = Prompt(
    blocks=[Block(uid=f"b{i}", type="paragraph", content=f"text {i}") for i in range(4)]
)
TOOL_RESULT = {
    "role": "user",
    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}],
}


def thinks(model: str, **request: Any) -> bool:
    body = {
        "model": model,
        "max_tokens": 1000,
        "messages": [{"role": "user", "content": "hi"}],
        **request,
    }
    dice = Dice(seed=0, body_hash="h", occurrence=0)
    return thinking_tokens(body, get_model(model), PROMPT, Scenario(), dice) is not None


@pytest.mark.parametrize(
    ("model", "request_", "expected"),
    [
        ("claude-haiku-5-5", {}, True),
        ("claude-haiku-5-5", {"thinking": {"type": "disabled"}}, False),
        (
            "claude-haiku-5-5",
            {"tools": [TOOL], "tool_choice": {"type": "tool", "name": "t"}},
            False,
        ),
        ("claude-haiku-5-5", {"tools": [TOOL], "tool_choice": {"type": "auto"}}, True),
        ("claude-sonnet-5-5", {}, True),
        ("claude-sonnet-5-5", {"thinking": {"type": "between_tools"}}, False),
        (
            "claude-sonnet-5-5",
            {
                "thinking": {"type": "between_tools"},
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "calling"},
                    TOOL_RESULT,
                ],
            },
            True,
        ),
        ("claude-opus-5-5", {}, True),
        ("claude-opus-5", {"tools": [TOOL], "tool_choice": {"type": "any"}}, True),
        ("claude-sonnet-4-6", {}, False),
        ("claude-sonnet-4-6", {"thinking": {"type": "adaptive"}}, True),
        ("claude-haiku-4-5", {"thinking": {"type": "enabled", "budget_tokens": 2048}}, True),
        ("claude-haiku-4-5", {}, False),
    ],
)
def test_whether_a_request_thinks(model, request_, expected):
    assert thinks(model, **request_) is expected


def test_enabled_thinking_stays_within_its_budget():
    body = {
        "model": "claude-haiku-4-5",
        "max_tokens": 5000,
        "messages": [{"role": "user", "content": "hi"}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    dice = Dice(seed=0, body_hash="h", occurrence=0)
    eager = Scenario(thinking=Thinking(base={"high": 5000}))  # Haiku 4.5 has no effort
    spent = thinking_tokens(body, get_model("claude-haiku-4-5"), PROMPT, eager, dice)
    assert spent == 1024
