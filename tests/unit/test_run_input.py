"""The one route from a run's stored options to its workflow input."""

import pytest
from pydantic import ValidationError

from blockbatch.core.outage_types import OutageOptions
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.retry_types import RetryRequest
from blockbatch.core.run_types import RunOptions, run_input
from blockbatch.core.stream_types import stream_input
from blockbatch.core.streams import StreamTriggers


def test_run_input_carries_the_options_the_workflow_reads() -> None:
    options = RunOptions(
        max_concurrent_packs=7,
        max_block_attempts=5,
        outage=OutageOptions(failures_to_pause=2),
        quality=QualityOptions(min_agreement=0.9, reask=False),
    )
    inp = run_input("r1", options, packs_per_history=12, retry=RetryRequest(reasons=["refused"]))
    assert (inp.run_id, inp.max_concurrent_packs, inp.max_block_attempts) == ("r1", 7, 5)
    assert inp.packs_per_history == 12
    assert inp.outage.failures_to_pause == 2
    assert inp.retry is not None and inp.retry.reasons == ["refused"]
    assert inp.quality is not None
    assert (inp.quality.min_agreement, inp.quality.reask) == (0.9, False)


def test_no_probe_in_batch_mode_or_at_rate_zero_without_a_gate() -> None:
    assert run_input("r", RunOptions(mode="batch")).quality is None
    off = RunOptions(quality=QualityOptions(probe_rate=0))
    assert run_input("r", off).quality is None
    gate_only = RunOptions(quality=QualityOptions(probe_rate=0, min_agreement=0.8))
    assert run_input("r", gate_only).quality is not None


def test_a_stream_starts_with_no_packs_and_no_probe() -> None:
    triggers = StreamTriggers(max_rows=10)
    inp = stream_input("s1", RunOptions(max_concurrent_packs=3), triggers, packs_per_history=9)
    assert inp.pack_count == 0 and inp.quality is None
    assert inp.triggers == triggers
    assert (inp.max_concurrent_packs, inp.packs_per_history) == (3, 9)
    assert inp.outage == OutageOptions()


def test_a_runs_call_heartbeat_reaches_its_workflow_and_is_bounded() -> None:
    assert run_input("r", RunOptions()).call_heartbeat_s == 20
    assert run_input("r", RunOptions(call_heartbeat_s=5)).call_heartbeat_s == 5
    triggers = StreamTriggers(max_rows=10)
    assert stream_input("s", RunOptions(call_heartbeat_s=4), triggers).call_heartbeat_s == 4
    for bad in (0, 1.5, 601, float("inf")):
        with pytest.raises(ValidationError, match="call_heartbeat_s"):
            RunOptions(call_heartbeat_s=bad)


def test_a_runs_db_step_timeout_reaches_its_workflow_and_is_bounded() -> None:
    assert run_input("r", RunOptions()).db_step_s == 60
    assert run_input("r", RunOptions(db_step_s=5)).db_step_s == 5
    triggers = StreamTriggers(max_rows=10)
    assert stream_input("s", RunOptions(db_step_s=8), triggers).db_step_s == 8
    for bad in (0, 4.5, 601, float("inf")):
        with pytest.raises(ValidationError, match="db_step_s"):
            RunOptions(db_step_s=bad)


def test_a_runs_call_retry_reaches_its_workflow_and_is_bounded() -> None:
    assert run_input("r", RunOptions()).call_retry_s == 2
    assert run_input("r", RunOptions(call_retry_s=0.2)).call_retry_s == 0.2
    for bad in (0, 0.05, 61, float("nan")):
        with pytest.raises(ValidationError, match="call_retry_s"):
            RunOptions(call_retry_s=bad)
