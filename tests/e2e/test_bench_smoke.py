"""Each benchmark script runs end to end on tiny inputs and writes valid JSON.

These check that the scripts work and what their JSON holds, never how fast anything was:
benchmark figures live in ``bench/results`` and ``docs/benchmarks.md``, not in assertions.
The scripts share the test session's stack (``bench.common.SharedStack``, through
``BENCH_SHARED_STACK``) instead of starting one each; each still gets a database of its own
and its scenario. They run in the test's process (``run_bench``: the script's ``main`` on the
test's event loop), not as ``python bench/x.py``, which only the ingest script's test still
does (the entry point: ``run_main``, the exit status); the workers and CLI processes a script
starts itself (``worker.py``, ``starter.py stream``) are still processes.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from bench.common import SHARED_STACK_ENV, SharedStack
from blockbatch.devtools import stack
from blockbatch.devtools.services import Services
from tests.conftest import SimulatorProcess

ROOT = Path(__file__).resolve().parents[2]
#: The scripts' environment: this module's shared stack (set by ``shared_stack``).
ENV: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def shared_stack(
    services: Services,
    pg: stack.PostgresInstance,
    temporal_env: WorkflowEnvironment,
    simulator_process: SimulatorProcess,
) -> Iterator[Services]:
    """The test session's own stack (tests/conftest.py), handed to the scripts as a shared
    one: no second Postgres, Temporal dev server and simulator for the benchmarks. Each
    script makes a database of its own and sets its scenario; the next test's `sim` fixture
    sets the simulator back to the default. Each xdist worker has a session stack of its
    own, so the module's tests are shared out among the workers like any others (no
    `xdist_group`): two scripts never set one simulator's scenario at once."""
    # Under /tmp, not pytest's directory (see the `pg` fixture in tests/conftest.py).
    root = Path(tempfile.mkdtemp(prefix="bb-bench-shared-"))
    services.save(SharedStack.file_of(root))
    ENV.update({**os.environ, SHARED_STACK_ENV: str(SharedStack.file_of(root))})
    # The scripts run in this process too (`run_bench`): theirs is this environment.
    before = os.environ.get(SHARED_STACK_ENV)
    os.environ[SHARED_STACK_ENV] = ENV[SHARED_STACK_ENV]
    try:
        yield services
    finally:
        ENV.clear()
        if before is None:
            os.environ.pop(SHARED_STACK_ENV, None)
        else:
            os.environ[SHARED_STACK_ENV] = before
        simulator_process.call("POST", "/_sim/reset")
        shutil.rmtree(root, ignore_errors=True)


def check_results(name: str, out: Path, printed: str) -> dict[str, Any]:
    """The script printed a table and wrote its JSON with the machine and the load."""
    assert "| " in printed, "the script prints a table"
    data = json.loads(out.read_text())
    assert data["benchmark"] == name
    for key in ("nproc", "ram_gib", "cpu_model", "python", "temporal_cli"):
        assert key in data["machine"]
    assert len(data["loadavg_start"]) == 3 and len(data["loadavg_end"]) == 3
    assert data["parameters"] and data["tables_markdown"] and data["date"]
    return data


async def run_bench(
    name: str, out: Path, capsys: pytest.CaptureFixture[str], *args: str
) -> dict[str, Any]:
    """``bench/<name>.py`` with ``args``, in this process: its ``main`` on this event loop
    (the stack is shared, so a process of its own would only add an interpreter's start
    and imports). ``test_ingest_script_runs_as_a_process`` runs one script as
    ``python bench/x.py``."""
    assert ENV, "the shared stack is not up"
    script = importlib.import_module(f"bench.{name}")
    code = await script.main(script.parse_args([*args, "--out", str(out)]))
    printed = capsys.readouterr().out
    assert code == 0, printed[-3000:]
    return check_results(name, out, printed)


def run_script(name: str, out: Path, *args: str, timeout: float = 280) -> dict[str, Any]:
    """``python bench/<name>.py`` with ``args`` as a process of its own."""
    assert ENV, "the shared stack is not up"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{name}.py"), *args, "--out", str(out)],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return check_results(name, out, proc.stdout)


@pytest.mark.timeout(300)
async def test_cost_script_reports_every_mode_with_parity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = await run_bench(
        "cost",
        tmp_path / "cost.json",
        capsys,
        "--blocks",
        "12",
        "--system-tokens",
        "2000",
        "--no-adversarial",
        # The batch modes' first look at their batch after 0.2 s, not the run's 5 s.
        "--batch-poll-s",
        "0.2",
        # One schema: the second ("revise") writes the same figures, twice the time.
        "--schemas",
        "extract",
    )
    assert set(data["schemas"]) == {"extract"}
    for schema in ("extract",):
        result = data["schemas"][schema]
        assert set(result["modes"]) == {
            "baseline",
            "pack10",
            "pack25",
            "auto",
            "batch",
            "auto_full_ids",
            "batch_full_ids",
        }
        # Short ids write fewer output tokens per block than full block_uids, same values.
        for mode in ("auto", "batch"):
            ids = result["short_ids"][mode]
            assert ids["output_per_block"]["saved"] > 0 and ids["input_per_block"]["saved"] > 0
            assert result["modes"][f"{mode}_full_ids"]["parity"]["mismatching_blocks"] == 0
        base = result["modes"]["baseline"]
        # One call per block, plus the warm-up call that writes the prompt cache.
        assert base["calls_ok"] == 13 and base["blocks"] == {"ai_complete": 12}
        for figures in result["modes"].values():
            assert figures["status"] == "completed"
            assert {
                "input_tokens",
                "output_tokens",
                "cache_write_tokens",
                "cache_read_tokens",
                "cost_usd",
                "split_events",
            } <= set(figures)
            assert set(figures["parity"]["per_field"]) == set(result["fields"])
            assert "x_floor_own_calls" in figures and "savings_vs_baseline" in figures
            quoted = figures["estimate"]
            assert quoted["messages_calls_while_quoting"] == 0
            assert quoted["quote"]["cost_usd"] > 0 and quoted["quote"]["x_actual"] > 0
        assert result["modes"]["pack10"]["estimate"]["quote"]["output_source"] == "ledger"
        assert result["floor"]["min_calls"] >= 1
        # The re-run of the edited document sends the edited blocks and reuses the others.
        reruns = result["rerun"]["reruns"]
        assert set(reruns) == {"warm", "cold"}
        for f in reruns.values():
            assert f["status"] == "completed" and f["sent_blocks"] == f["edited_blocks"]
            assert f["blocks_reused"] == 12 - len(f["edited_blocks"])
            assert f["unchanged_differing"] == 0 and f["reuse_saved_usd"] > 0
    assert set(data["estimate_summary"]["x_actual"]) == {
        f"handbook/{s}/{m}"
        for s in ("extract",)
        for m in (
            "baseline",
            "pack10",
            "pack25",
            "auto",
            "batch",
            "auto_full_ids",
            "batch_full_ids",
        )
    }
    # A budget of half pack10's cost holds, and a raised one finishes the run.
    budget = data["schemas"]["extract"]["budget"]
    assert budget["within_budget"]
    if "refused" not in budget:
        assert budget["status"] == "budget_exhausted" and budget["left"]["blocks_left"] > 0
        assert budget["retry"]["status"] == "completed"
        assert budget["total"]["within_budget"] and budget["total"]["blocks_paid_twice"] == 0


@pytest.mark.timeout(300)
async def test_throughput_script_compares_runs_with_the_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = await run_bench(
        "throughput",
        tmp_path / "throughput.json",
        capsys,
        "--blocks",
        "10",
        "30",
        "--reference-children",
        "6",
    )
    assert [r["blocks"] for r in data["runs"]] == [10, 30]
    assert all(r["status"] == "completed" and r["blocks_ok"] == r["blocks"] for r in data["runs"])
    assert {r["starts"] for r in data["reference"]} == {"parallel", "sequential"}
    assert all("fraction_of_ceiling" in r and "ms_per_pack" in r for r in data["runs"])


@pytest.mark.timeout(300)
async def test_scale_script_inspects_every_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = await run_bench(
        "scale",
        tmp_path / "scale.json",
        capsys,
        "--blocks",
        "150",
        "--packs-per-history",
        "3",
        "--workers",
        "1",
    )
    assert data["status"] == "completed" and data["blocks_ok"] == 150
    histories = data["histories"]
    assert len(histories["run_workflow_chain"]) >= 2  # it continued as new
    assert histories["pack_workflows_inspected"] == data["packs"]
    assert data["under_temporal_warning_thresholds"] is True
    assert data["worker_peak_rss_bytes"][0] > 0
    assert data["postgres"]["per_table"]["overlays"]["rows"] == 150


@pytest.mark.timeout(300)
async def test_ratelimits_script_reports_bound_and_429s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = await run_bench(
        "ratelimits",
        tmp_path / "ratelimits.json",
        capsys,
        # Six blocks: the baseline's six packs still outnumber its four at once; each pack
        # costs its workflow's overhead, which is most of a small run's time.
        "--blocks",
        "6",
        "--rpm",
        "1000",
        "--otpm",
        "1000000",
        "--ttft-ms",
        "20",
        "--per-token-ms",
        "0.1",
        "--workers",
        "1",
        "--concurrency",
        "4",
    )
    assert [r["mode"] for r in data["runs"]] == ["auto", "baseline"]
    for run in data["runs"]:
        assert run["status"] == "completed" and run["blocks_ok"] == 6
        assert run["lower_bound_min"] > 0 and run["responses_429"] >= 0


@pytest.mark.timeout(300)
async def test_questions_script_compares_packed_with_one_call_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = await run_bench(
        "questions",
        tmp_path / "questions.json",
        capsys,
        "--questions",
        "8",
        "--ttft-ms",
        "0",
        "--per-token-ms",
        "0",
    )
    packed, single = data["modes"]
    assert (packed["mode"], single["mode"]) == ("packed", "one per call")
    assert packed["answered"] == single["answered"] == 8
    assert packed["largest_pack"] == 8 and single["largest_pack"] == 1
    assert single["pack_count"] == 8 and packed["calls"] < single["calls"]
    assert data["parity"] == {"questions": 8, "answers_differing": 0}
    for mode in (packed, single):
        assert abs(mode["item_usage_cost_sum_usd"] - mode["cost_usd"]) < 1e-5


@pytest.mark.timeout(300)
async def test_quality_script_compares_calibrate_with_the_simulators_truth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = await run_bench(
        "quality",
        tmp_path / "quality.json",
        capsys,
        "--seeds",
        "1",
        "--blocks",
        "10",
        "--sample",
        "10",
        "--sizes",
        "5,10",
        "--no-fsync",
        "--temporal-memory",
    )
    cal = data["calibration"]
    assert cal["cases"] == 2 and len(cal["seeds"]) == 1
    seed = cal["seeds"][0]
    for size in ("5", "10"):
        figures = seed["sizes"][size]
        # The sample's truth is what calibrate measured: every injected wrong value disagrees.
        assert figures["measured"] == figures["sample_true"]
        assert figures["run"]["answered"] == 10
    assert isinstance(seed["recommended_meets_target"], bool)


@pytest.mark.timeout(300)
async def test_stream_script_reports_the_steady_stream_and_the_trickle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = await run_bench(
        "stream",
        tmp_path / "stream.json",
        capsys,
        "--rows",
        "30",
        "--rate",
        "50",
        "--max-rows",
        "10",
        "--trickle-rows",
        "2",
        # A row every 0.6 s and a --max-wait of 0.5 s, not 1 s and 2 s: the same trickle
        # (rows sent by the wait, the stream held open), seconds shorter.
        "--trickle-every",
        "0.6",
        "--trickle-wait-s",
        "0.5",
        "--ttft-ms",
        "0",
        "--ms-per-token",
        "0",
        "--no-fsync",
        "--temporal-memory",
    )
    stream, document = data["steady"]["stream"], data["steady"]["document"]
    assert stream["exit_code"] == 0 and stream["rows_sent"] == stream["result_lines"] == 30
    assert stream["ok"] == stream["rows_done"] == document["rows_done"] == 30
    assert stream["packs_full"] == 3 and stream["rows_per_call"] == 10.0
    assert data["steady"]["cost_ratio"] > 0
    trickle = data["trickle"]
    assert trickle["rows"] == 2 and len(trickle["per_row"]) == 2


@pytest.mark.timeout(300)
async def test_quality_probe_script_reports_estimate_gate_and_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = await run_bench(
        "quality_probe",
        tmp_path / "quality_probe.json",
        capsys,
        "--blocks",
        "40",
        # One pack size: each size is one more run through the same estimate.
        "--sizes",
        "10",
        "--cost-blocks",
        "20",
        "--system-tokens",
        "2000",
        "--no-fsync",
        "--temporal-memory",
    )
    assert set(data["estimate"]) == {"seed1/pack10"}
    case = data["estimate"]["seed1/pack10"]
    assert case["status"] == "completed" and case["true"]["answered"] == 40
    assert case["probe"]["sampled"] > 0 and case["probe"]["ci"] is not None
    assert data["gate"]["no_gate"]["status"] == "completed"
    for name in ("extract", "revise"):
        cost = data["cost"][name]
        assert cost["without"]["probe"]["probe_calls"] == 0
        assert cost["with"]["cost_usd"] > 0


@pytest.mark.timeout(300)
async def test_models_script_measures_each_model_and_calibrate_against_the_truth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = await run_bench(
        "models",
        tmp_path / "models.json",
        capsys,
        "--seeds",
        "1",
        "--blocks",
        "20",
        "--pack-size",
        "10",
        "--sample",
        "10",
        "--sizes",
        "5,10",
        # One share of repeated wrong answers for the escalation section, not three.
        "--repeat",
        "1",
        "--no-fsync",
        "--temporal-memory",
    )
    runs = data["models"]["runs"]
    assert len(runs) == 5 and all(r["answered"] == 20 for r in runs.values())
    reference = runs["Sonnet 5.5 alone (reference)"]
    assert reference["calls"] >= 20 and reference["pack_size"] == 1
    probed = runs["Haiku 5.5, packs of 10, probe alone on Sonnet 5.5"]
    assert probed["probe_model"] == "claude-sonnet-5-5"
    seed = data["calibrate"]["seeds"][0]
    assert seed["run"]["model"] == seed["choice"][0] and isinstance(seed["meets_target"], bool)
    assert set(seed["measured"]) == {"claude-haiku-5-5", "claude-sonnet-5-5"}
    escalation = data["escalation"]
    (esc,) = escalation["seeds"]
    assert esc["wrong_repeat"] == 1 and set(escalation["by_repeat"]) == {"1.0"}
    assert len(esc["runs"]) == 5 and esc["cost_share_of_sonnet_packed"] > 0


@pytest.mark.timeout(300)
def test_ingest_script_times_a_pdf_against_its_runs_first_pack(tmp_path: Path) -> None:
    data = run_script("ingest", tmp_path / "ingest.json", "--pages", "3", "--repeat", "1")
    # 21 blocks of text and each page's number (typed page_number, set aside at the run)
    assert data["document"]["pages"] == 3 and data["document"]["blocks"] == 24
    assert data["run"]["status"] == "completed"
    assert 0 < data["run"]["first_pack_answered_s"] <= data["run"]["first_pack_applied_s"]
    assert data["ingest_s"] > 0 and len(data["parse_s"]) == 1
    assert data["first_pack_with_latency_model"]["first_pack_answered_s"] > 0
