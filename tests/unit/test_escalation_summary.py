"""The run summary says what an escalation sent up, by reason, and what its two parts cost;
its calls are not counted as the run's blocks per call."""

from __future__ import annotations

from blockbatch.core.commands import PROG
from blockbatch.core.escalation_types import EscalationResult, EscalationVsProbe
from blockbatch.core.quality import rate
from blockbatch.core.run_types import RunResult
from blockbatch.report import summary_dict, summary_lines

LINKS = {"run": "http://ui/run", "packs": "http://ui/packs"}
SONNET = "claude-sonnet-5-5"


def _result(escalation: EscalationResult | None) -> RunResult:
    return RunResult(
        run_id="r1",
        status="completed",
        model="claude-haiku-5-5",
        blocks_total=40,
        blocks_ai_complete=40,
        calls=2 + 2 + 3,
        pack_count=2,
        cost_usd=0.05,
        escalation=escalation,
    )


def _escalation(**fields: object) -> EscalationResult:
    return EscalationResult.model_validate(
        {
            "model": SONNET,
            "blocks": 40,
            "compared": 39,
            "kept": 37,
            "escalated_by_reason": {"disagrees": 2, "refused": 1},
            "escalated": 2,
            "escalation_failed": 1,
            "second_pass_calls": 2,
            "second_pass_cost_usd": 0.01,
            "escalation_calls": 3,
            "escalation_cost_usd": 0.02,
            **fields,
        }
    )


def _rows(result: RunResult) -> dict[str, str]:
    lines = summary_lines(result, baseline=None, links=LINKS)
    return {line[2:14].strip(): line[15:] for line in lines[1:]}


def test_the_summary_says_what_went_up_by_reason_and_the_cost_of_each_pass() -> None:
    rows = _rows(_result(_escalation()))
    assert rows["escalated"] == (
        f"to {SONNET}: 39 of 40 blocks compared in a second packing, 37 kept, 3 sent up "
        f"(2 disagrees, 1 refused); 2 answered by {SONNET}, 1 failed (first answer kept)"
    )
    assert rows["escalation $"] == (
        "second pass 2 calls $0.0100 · escalation 3 calls $0.0200 (60% of the run)"
    )
    # The run's own calls answered its blocks; the escalation's are named apart.
    assert rows["calls"].startswith("7 calls: 2 calls for 40 blocks (20.0 blocks per call;")
    assert rows["calls"].endswith(", 2 second-pass calls, 3 escalation calls")


def test_a_cancelled_escalation_says_how_many_blocks_it_left() -> None:
    rows = _rows(_result(_escalation(status="cancelled", left=4)))
    assert rows["escalated"].endswith(
        f"; cancelled with 4 blocks left (their first answers stay): go on with "
        f"`{PROG} escalate r1 --to {SONNET}`"
    )
    failed = _rows(_result(_escalation(status="failed", left=4)))
    assert "; FAILED with 4 blocks left (their first answers stay;" in failed["escalated"]


def test_a_run_never_escalated_has_no_escalation_rows() -> None:
    rows = _rows(_result(None))
    assert "escalated" not in rows and "escalation $" not in rows
    assert summary_dict(_result(None), baseline=None, links=LINKS)["escalation"] is None
    data = summary_dict(_result(_escalation()), baseline=None, links=LINKS)
    assert data["escalation"]["escalated_by_reason"] == {"disagrees": 2, "refused": 1}


def test_answers_the_probe_had_alone_on_the_escalation_model_are_said_reused() -> None:
    rows = _rows(_result(_escalation(reused_from_probe=1)))
    assert rows["escalated"].endswith(
        f"; 2 answered by {SONNET} (1 by the quality probe's call alone, not paid again), "
        "1 failed (first answer kept)"
    )


def test_blocks_compared_with_the_probes_answer_alone_are_said_apart() -> None:
    rows = _rows(_result(_escalation(compared=30, compared_with_probe=9)))
    assert rows["escalated"].startswith(
        f"to {SONNET}: 30 of 40 blocks compared in a second packing (and 9 with the quality "
        "probe's answer alone, no second call), 37 kept, 3 sent up"
    )
    plain = _rows(_result(_escalation()))["escalated"]
    assert "quality probe's answer alone" not in plain


def test_the_escalation_is_checked_against_the_probes_answers_alone() -> None:
    check = EscalationVsProbe(probe_model=SONNET, before=rate(55, 60), after=rate(59, 60))
    rows = _rows(_result(_escalation(vs_probe=check)))
    assert rows["vs probe"] == (
        f"on 60 sampled blocks, answers agree with {SONNET} alone: 91.7% before escalation, "
        "98.3% after"
    )
    # The row comes right under the escalation's two.
    lines = summary_lines(_result(_escalation(vs_probe=check)), baseline=None, links=LINKS)
    labels = [line[2:14].strip() for line in lines[1:]]
    assert labels[labels.index("escalated") : labels.index("escalated") + 3] == [
        "escalated",
        "escalation $",
        "vs probe",
    ]
    data = summary_dict(_result(_escalation(vs_probe=check)), baseline=None, links=LINKS)
    assert data["escalation"]["vs_probe"]["after"]["agreeing"] == 59
    # No sample compared: no row.
    assert "vs probe" not in _rows(_result(_escalation()))


def test_a_probe_on_the_runs_own_model_says_what_it_cannot_see() -> None:
    check = EscalationVsProbe(
        probe_model="claude-haiku-5-5", run_model=True, before=rate(1, 2), after=rate(2, 2)
    )
    row = _rows(_result(_escalation(vs_probe=check)))["vs probe"]
    assert row == (
        "on 2 sampled blocks, answers agree with claude-haiku-5-5 alone (the run's own "
        "model: blind to the mistakes it makes alone too): 50.0% before escalation, "
        "100.0% after"
    )
