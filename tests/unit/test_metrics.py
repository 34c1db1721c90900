"""The metrics' pure mapping: activity outputs and errors to counted calls, and the metrics
table of docs/metrics.md against the metrics a worker serves."""

from __future__ import annotations

import re
import socket
import urllib.request
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.errors import RETRYABLE, RUN_STOPPED, application_error
from blockbatch.core.batch_types import ApplyRoundOutput, BatchCounts, CollectRoundOutput
from blockbatch.core.call_types import CallFacts, CallModelOutput, LimiterNote, Totals
from blockbatch.core.claude_errors import classify
from blockbatch.runtime.metrics import (
    METRICS,
    BlockbatchMetrics,
    Call,
    MetricsUnavailable,
    batch_calls,
    call_of_error,
    call_of_facts,
    call_of_output,
    metrics_runtime,
    status_class,
)

METRICS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


@pytest.mark.parametrize(
    ("status", "label"),
    [
        (429, "429"),
        (529, "529"),
        (500, "5xx"),
        (503, "5xx"),
        (400, "4xx"),
        (413, "4xx"),
        (401, "4xx"),
        (None, "no_answer"),
    ],
)
def test_api_errors_are_counted_in_a_few_status_classes(status: int | None, label: str) -> None:
    assert status_class(status) == label


def test_an_answered_pack_call_counts_its_tokens_by_kind_and_its_cost() -> None:
    out = CallModelOutput(
        outcome="answered",
        block_uids=["d:0"],
        call_id=7,
        input_tokens=10,
        output_tokens=20,
        cache_creation_input_tokens=30,
        cache_read_input_tokens=40,
        cost_usd=0.5,
    )
    assert call_of_output(out) == Call(
        "pack", "succeeded", {"input": 10, "output": 20, "cache_write": 30, "cache_read": 40}, 0.5
    )


def test_a_reused_answer_or_a_call_never_made_counts_nothing() -> None:
    reused = CallModelOutput(
        outcome="answered",
        block_uids=["d:0"],
        call_id=7,
        reused=True,
        input_tokens=10,
        cost_usd=0.5,
    )
    assert call_of_output(reused) is None
    for outcome in ("oversized", "cancelled", "empty"):
        assert call_of_output(CallModelOutput(outcome=outcome, block_uids=[])) is None


def test_a_refused_request_is_a_failed_call_and_a_4xx() -> None:
    error = classify(400, "invalid_request_error", "no")
    out = CallModelOutput(outcome="request_error", block_uids=["d:0"], call_id=3, error=error)
    assert call_of_output(out) == Call("pack", "failed", error="4xx")


def test_raised_claude_errors_are_failed_calls_with_their_status() -> None:
    throttled = application_error(classify(429, "rate_limit_error", "slow down", retry_after="1"))
    assert call_of_error("pack", throttled) == Call("pack", "failed", error="429")
    down = application_error(classify(529, "overloaded_error", "busy"), give_up=True)
    assert call_of_error("warm_up", down) == Call("warm_up", "failed", error="529")
    lost = application_error(classify(None, "APITimeoutError", "timed out"))
    assert call_of_error("pack", lost) == Call("pack", "failed", error="no_answer")
    key = application_error(classify(401, "authentication_error", "bad key"))
    assert key.type == RUN_STOPPED
    assert call_of_error("pack", key) == Call("pack", "failed", error="4xx")


def test_an_answer_another_worker_recorded_first_is_a_failed_call_not_an_api_error() -> None:
    duplicate = ApplicationError("pack attempt answered twice", type=RETRYABLE)
    assert call_of_error("pack", duplicate) == Call("pack", "failed")


def test_errors_before_any_call_count_no_call() -> None:
    assert call_of_error("pack", ApplicationError("no run", type="ValueError")) is None
    assert call_of_error("pack", ValueError("no run")) is None


def test_a_probe_counts_the_call_its_activity_reported() -> None:
    answered = CallFacts(status="succeeded", input_tokens=12, output_tokens=1, cost_usd=0.0001)
    assert call_of_facts("probe", answered) == Call(
        "probe", "succeeded", {"input": 12, "output": 1, "cache_read": 0, "cache_write": 0}, 0.0001
    )
    down = CallFacts(status="failed", api_error=True, http_status=503)
    assert call_of_facts("probe", down).error == "5xx"
    lost = CallFacts(status="failed", api_error=True)
    assert call_of_facts("probe", lost).error == "no_answer"


def test_a_refused_warm_up_answer_is_a_failed_call_and_a_4xx() -> None:
    error = classify(400, "invalid_request_error", "no")
    out = CallModelOutput(outcome="request_error", block_uids=[], call_id=3, error=error)
    facts = CallFacts.of_output(out)
    assert facts is not None
    assert call_of_facts("warm_up", facts) == Call("warm_up", "failed", error="4xx")


def test_a_batch_round_counts_answered_and_errored_requests_not_canceled_ones() -> None:
    out = CollectRoundOutput(
        counts=BatchCounts(succeeded=5, errored=2, canceled=1, expired=1),
        totals=Totals(calls=9, input_tokens=100, output_tokens=50, cost_usd=0.25),
    )
    ok, failed = batch_calls(out)
    assert (ok.purpose, ok.status, ok.count, ok.cost_usd) == ("batch_request", "succeeded", 5, 0.25)
    assert ok.tokens == {"input": 100, "output": 50, "cache_read": 0, "cache_write": 0}
    assert (failed.status, failed.count, failed.tokens) == ("failed", 3, {})


def test_a_batch_round_counts_its_failed_blocks_by_reason() -> None:
    out = ApplyRoundOutput()
    out.count_failed({"oversized": 2, "truncated": 0})
    out.count_failed({"oversized": 1, "invalid_value": 3})
    assert out.failed == 6
    assert out.failed_reasons == {"oversized": 3, "invalid_value": 3}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cost_is_counted_in_micro_dollars_without_losing_fractions() -> None:
    port = _free_port()
    runtime = metrics_runtime("127.0.0.1", port)  # serves while referenced
    metrics = BlockbatchMetrics(runtime.metric_meter)
    for _ in range(1000):  # 1000 x 0.3 micro-dollars: nothing is lost to rounding down
        metrics.call(Call("pack", "succeeded", cost_usd=0.0000003))
    metrics.limiter(
        LimiterNote(
            at="2026-11-23T00:00:00Z",
            limits={"requests": 50},
            learned=True,
            rate=0.5,
            binding="requests",
        ),
        1.5,
    )
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'blockbatch_llm_cost_microdollars_total{purpose="pack"} 300' in text
    assert 'blockbatch_llm_calls_total{purpose="pack",status="succeeded"} 1000' in text
    assert 'blockbatch_limiter_waits_total{binding="requests"} 1' in text
    assert "blockbatch_limiter_rate 0.5" in text
    assert 'blockbatch_limiter_wait_seconds_bucket{le="2"} 1' in text


def test_a_port_in_use_says_what_to_do() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            MetricsUnavailable,
            match=(
                rf"cannot serve metrics on 127.0.0.1:{port} .*set METRICS_PORT to a free "
                "port .* or unset it"
            ),
        ):
            metrics_runtime("127.0.0.1", port)


def test_the_metrics_page_lists_every_metric_with_its_labels() -> None:
    rows = re.findall(
        r"^\| `(blockbatch_\w+)` \| (\w+) \| ([^|]*) \|",
        METRICS_PAGE.read_text(),
        flags=re.MULTILINE,
    )
    table = {name: (kind, tuple(re.findall(r"`(\w+)`", labels))) for name, kind, labels in rows}
    assert table == {name: (m.type, m.labels) for name, m in METRICS.items()}


def test_no_label_could_carry_a_run_a_block_or_a_key() -> None:
    allowed = {"purpose", "status", "kind", "reason", "limit", "binding"}
    assert {label for m in METRICS.values() for label in m.labels} <= allowed
