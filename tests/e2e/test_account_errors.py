"""Claude refusing the account, not the request, end to end on the simulator's account
refusals (contract §6 "Spend limits"), and a refused block (contract §2, §0 rule 9).

A spend cap or a billing error stops the run's calls within one round: no call is retried,
no pack is halved, every block ends ``cancelled`` with the error's reason code, the run says
what to do, and the fleet's limiter is not cut. A refused lone block fails once with
``refused`` and is not asked again.
"""

from __future__ import annotations

import pytest

from blockbatch.core.results import PackResults
from tests.conftest import Stack
from tests.e2e.test_reason_codes import codes, paragraphs, run

BLOCKS, PACK, WINDOW = 8, 2, 2


async def _calls(s: Stack, run_id: str) -> list[tuple[str, int | None]]:
    return [
        (r["pack_path"], r["http_status"])
        for r in await s.pool.fetch(
            "select pack_path, http_status from llm_calls where run_id = $1 order by call_id",
            run_id,
        )
    ]


@pytest.mark.parametrize(
    ("account_error", "status", "code", "says"),
    [
        (
            "enforced_spend_limit_reached",
            429,
            "spend_limit",
            "raise the limit in the Claude Console",
        ),
        (
            "contract_spend_limit_reached",
            429,
            "spend_limit",
            "raise the limit in the Claude Console",
        ),
        (
            "linked_organization_spend_limit_reached",
            402,
            "spend_limit",
            "raise the limit in the Claude Console",
        ),
        ("self_spend_limit", 400, "spend_limit", "raise the limit in the Claude Console"),
        ("billing_error", 402, "billing", "Billing"),
    ],
)
async def test_an_account_refusal_stops_the_runs_calls_within_one_round(
    bbstack: Stack, account_error: str, status: int, code: str, says: str
) -> None:
    bbstack.sim.scenario(errors={"account_error": account_error})
    run_id, _, result = await run(
        bbstack, paragraphs(BLOCKS), pack_size=PACK, max_concurrent_packs=WINDOW
    )
    assert result.status == "failed" and result.error is not None
    assert says in result.error and "retry" in result.error
    assert set((await codes(bbstack, run_id)).values()) == {("cancelled", code)}
    calls = await _calls(bbstack, run_id)
    # One round: the warm-up and at most the window of packs, each once, never a half.
    assert {s for _, s in calls} == {status}
    paths = [p for p, _ in calls if p != "warm-up"]
    assert len(paths) == len(set(paths)) <= WINDOW
    assert all("." not in p for p in paths)
    assert (
        await bbstack.pool.fetchval("select count(*) from split_events where run_id = $1", run_id)
        == 0
    )
    # A spend cap says nothing about the rate: the fleet's limiter is not cut.
    assert await bbstack.pool.fetchval("select min(factor) from rate_limiters") == 1.0


@pytest.mark.skipif(
    not hasattr(PackResults, "refusal"),
    reason="needs PackResults.refusal (the request/answer contract)",
)
async def test_a_refused_block_fails_alone_once_and_is_not_asked_again(bbstack: Stack) -> None:
    refused = "Paragraph 2 asks for something the model declines."
    bbstack.sim.scenario(refuse_contents=[refused], refusal_category="cyber")
    run_id, uids, result = await run(bbstack, paragraphs(4, {2: refused}), pack_size=4)
    found = await codes(bbstack, run_id)
    assert found[uids[2]] == ("failed", "refused")
    assert [found[u][0] for u in uids if u != uids[2]] == ["ai_complete"] * 3
    assert result.status == "completed_with_failures"
    last_error = await bbstack.pool.fetchval(
        "select last_error from overlays where run_id = $1 and block_uid = $2", run_id, uids[2]
    )
    assert "cyber" in last_error
    # Halved down to the block alone, which was asked once.
    alone = await bbstack.pool.fetchval(
        """select count(*) from llm_calls where run_id = $1 and block_uids = array[$2]""",
        run_id,
        uids[2],
    )
    assert alone == 1
