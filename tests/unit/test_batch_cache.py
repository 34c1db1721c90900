"""How a batch round uses the prompt cache (``blockbatch.core.batching.round_cache``): a
pre-warm when the round's reads repay its sync write, reads while the prefix is still
cached, and no ``cache_control`` (no write premium) when hits are unlikely."""

from __future__ import annotations

import pytest

from blockbatch.core.batching import (
    BATCH_CACHE_HIT_RATE,
    BATCH_WARM_HIT_RATE,
    prefix_costs,
    round_cache,
    without_cache_control,
)
from blockbatch.core.prompt import build_request
from blockbatch.core.registry import get_model
from blockbatch.core.schema import load_schema

HAIKU = get_model("claude-haiku-5-5")
SONNET = get_model("claude-sonnet-5-5")
PREFIX = 33_520  # the cost suite's prefix (a 25,000-token prompt, new tokenizer)


@pytest.mark.parametrize("model", [HAIKU, SONNET], ids=lambda m: m.id)
def test_a_round_of_many_requests_is_pre_warmed_and_costs_less_than_no_caching(model) -> None:
    plan = round_cache(model, PREFIX, 8, warm=False, hit_rate=BATCH_WARM_HIT_RATE)
    c = prefix_costs(model, PREFIX)
    assert plan.plan == "pre-warm" and plan.cache_control
    assert plan.expected_usd < 8 * c["plain"]
    # The pre-warm is a sync 1-hour write (twice the input price, not halved).
    assert c["warm"] == pytest.approx(2 * c["write"])
    # The worst case: the pre-warm, and every request missing and writing the prefix.
    assert plan.worst_usd == pytest.approx(c["warm"] + 8 * c["write"])


def test_a_lone_request_on_a_cold_cache_sends_no_cache_control() -> None:
    plan = round_cache(HAIKU, PREFIX, 1, warm=False, hit_rate=1.0)
    assert plan.plan == "none" and not plan.cache_control
    assert plan.expected_usd == pytest.approx(prefix_costs(HAIKU, PREFIX)["plain"])


def test_a_prefix_under_the_minimum_is_never_cached() -> None:
    assert round_cache(HAIKU, 0, 50, warm=True, hit_rate=1.0).plan == "none"


def test_a_warm_prefix_is_read_even_by_a_lone_request_unless_hits_are_rare() -> None:
    assert round_cache(HAIKU, PREFIX, 1, warm=True, hit_rate=0.95).plan == "read"
    # Reading pays only while hits beat plain input: a miss writes at 2x input.
    assert round_cache(HAIKU, PREFIX, 1, warm=True, hit_rate=0.3).plan == "none"


def test_few_requests_do_not_repay_a_pre_warm() -> None:
    # The sync write costs about four batch requests' plain prefix.
    assert round_cache(HAIKU, PREFIX, 3, warm=False, hit_rate=0.95).plan == "none"


@pytest.mark.parametrize("model", [HAIKU, SONNET], ids=lambda m: m.id)
def test_a_first_round_sends_one_request_ahead_at_half_the_pre_warms_price(model) -> None:
    lead = round_cache(model, PREFIX, 6, warm=False, hit_rate=BATCH_WARM_HIT_RATE, lead=True)
    pre_warm = round_cache(model, PREFIX, 6, warm=False, hit_rate=BATCH_WARM_HIT_RATE)
    c = prefix_costs(model, PREFIX)
    assert lead.plan == "lead" and lead.cache_control
    assert pre_warm.plan == "pre-warm"
    # The lead writes at the batch price where the pre-warm writes at the sync price, and
    # it is one of the round's requests, not one more call: the run saves more than a write.
    assert pre_warm.expected_usd - lead.expected_usd > c["write"]
    assert lead.worst_usd == pytest.approx(6 * c["write"])


def test_a_lone_request_is_never_sent_ahead() -> None:
    assert round_cache(HAIKU, PREFIX, 1, warm=False, hit_rate=1.0, lead=True).plan == "none"


def test_a_few_requests_on_a_cold_cache_write_the_prefix_themselves() -> None:
    # Five requests: a sync pre-warm (two batch writes) costs more than letting the first
    # request write and the other four read at the cold rate (the contract's "30% to 98%").
    plan = round_cache(HAIKU, PREFIX, 5, warm=False, hit_rate=BATCH_WARM_HIT_RATE)
    c = prefix_costs(HAIKU, PREFIX)
    cold = BATCH_CACHE_HIT_RATE * c["read"] + (1 - BATCH_CACHE_HIT_RATE) * c["write"]
    assert plan.plan == "write" and plan.cache_control
    assert plan.expected_usd == pytest.approx(c["write"] + 4 * cold)
    assert plan.expected_usd < c["warm"] + 5 * (
        BATCH_WARM_HIT_RATE * c["read"] + (1 - BATCH_WARM_HIT_RATE) * c["write"]
    )


def test_without_cache_control_removes_every_breakpoint_and_keeps_the_rest() -> None:
    spec = load_schema(
        {"properties": {"s": {"type": "string"}}, "prompt_config": {"system_instructions": "x"}}
    )
    blocks = [{"block_uid": "a", "block_type": "paragraph", "block_content": "x"}]
    request = build_request(spec, blocks, max_tokens=100, cache_ttl="1h")
    plain = without_cache_control(request)
    assert "cache_control" in str(request["system"])
    assert "cache_control" not in str(plain["system"])
    assert [b["text"] for b in plain["system"]] == [b["text"] for b in request["system"]]
    assert {k: v for k, v in plain.items() if k != "system"} == {
        k: v for k, v in request.items() if k != "system"
    }
