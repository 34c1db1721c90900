"""starter.py run / watch / status / list / cancel / calls, as a subprocess on the real stack."""

from __future__ import annotations

import asyncio
import signal

from tests.conftest import Stack
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`
from tests.waiting import DEADLINE_S


async def test_run_follows_to_a_summary_and_lists_its_calls(cli: Cli, bbstack: Stack) -> None:
    doc, schema = cli.doc(60), cli.schema()
    # The quote first: it counts tokens, stores nothing, and calls Claude for nothing else.
    quoted = await cli("estimate", doc, "--schema", schema, "--pack-size", "10", "--json")
    assert quoted.code == 0, quoted.err
    q = quoted.json()
    assert q["input_source"] == "count_tokens" and q["packs"] == 6
    # The simulator counted: the quote says so, never passing its count off as Claude's.
    assert q["counted_by_simulator"] is True
    probe = q["sync"]["probe_calls"]
    assert probe > 0 and q["batch"]["probe_calls"] == 0
    # Batch: six requests, and the sync pre-warm when the round's reads repay it.
    assert q["sync"]["calls"] == 7 + probe
    assert q["batch"]["calls"] == 6 + (1 if q["batch"]["warm_up"] else 0)
    # Token counting, and reading the Models API's facts of the model: no Messages call.
    requests = {
        k: v
        for k, v in bbstack.sim.stats()["requests"].items()
        if "/v1/" in k and not k.startswith("GET /v1/models")
    }
    assert set(requests) == {"POST /v1/messages/count_tokens"}, requests
    assert sum(requests["POST /v1/messages/count_tokens"].values()) == q["count_requests"] == 4
    dry = await cli("run", doc, "--schema", schema, "--pack-size", "10", "--dry-run")
    assert dry.code == 0 and "quote: 60 blocks of doc.md" in dry.out and "sync *" in dry.out
    assert "SIMULATED count: the simulator counted it (4 requests)" in dry.out, dry.out
    assert "quality-probe call" in dry.out, dry.out
    assert await bbstack.pool.fetchval("select count(*) from documents") == 0
    assert await bbstack.pool.fetchval("select count(*) from runs") == 0

    async with bbstack.worker():
        # The quote is checked against the calls, the quality probe's too (its sample is
        # the run's own, of the size quoted).
        run = await cli("run", doc, "--schema", schema, "--pack-size", "10")
    assert run.code == 0, run.err
    run_id = run.run_id
    spent = await bbstack.pool.fetchrow(
        """select count(*) as calls, sum(input_tokens) as input, sum(cost_usd)::float8 as cost,
                  sum(cache_creation_input_tokens) as writes,
                  sum(cache_read_input_tokens) as reads from llm_calls where run_id = $1""",
        run_id,
    )
    sync = q["sync"]
    assert sync["calls"] == spent["calls"]
    # The simulator counts as it bills: the prefix and the blocks were counted exactly.
    assert (sync["cache_write_tokens"], sync["cache_read_tokens"]) == (
        spent["writes"],
        spent["reads"],
    )
    # The quote's probe sample (a fixed seed) and the run's (seeded by its run id) are as
    # many blocks, not the same ones: each of them may differ by the spread of block sizes.
    spread = await bbstack.pool.fetchval(
        "select max(est_tokens) - min(est_tokens) from blocks join runs using (document_id) "
        "where run_id = $1",
        run_id,
    )
    assert abs(sync["input_tokens"] - spent["input"]) <= 0.02 * spent["input"] + probe * spread
    # Output is the planner's estimate (no earlier run of this schema): high, not wild. The
    # packs and the warm-up ask the same blocks in the quote and the run; the probes do not
    # (their samples differ, above), so they are compared apart: a run whose probe drew
    # short blocks was quoted at 2.0003x its cost in all, its packs at 1.99x (a CI run).
    probes = await bbstack.pool.fetchval(
        """select coalesce(sum(cost_usd), 0)::float8 from llm_calls
           where run_id = $1 and purpose = 'quality_probe'""",
        run_id,
    )
    quoted_packs = sync["cost_usd"] - sync["probe_cost_usd"]
    assert spent["cost"] - probes <= quoted_packs <= 2 * (spent["cost"] - probes)
    assert 0 < probes <= sync["probe_cost_usd"]
    assert spent["cost"] <= sync["max_cost_usd"]
    for text in (
        "completed",
        "60 ok · 0 failed · 0 cancelled · 60 total",
        "calls for 60 blocks",
        "cache read",
        "cache hits",
        "one call per block, no caching",
        f"/workflows/run-{run_id}",
        f"BlockbatchRunId%20%3D%20%22{run_id}%22",
    ):
        assert text in run.out, (text, run.out)

    status = await cli("status", run_id)
    assert status.code == 0 and "completed" in status.out and "doc.md" in status.out
    listed = await cli("list")
    assert listed.code == 0 and run_id in listed.out

    calls = await cli("calls", run_id)
    assert calls.code == 0, calls.err
    n_calls = await bbstack.pool.fetchval(
        "select count(*) from llm_calls where run_id = $1", run_id
    )
    # 6 packs, the warm-up call that writes the prompt cache and the probe's calls.
    assert n_calls == 7 + probe
    for pack in range(6):
        assert f"run-{run_id}/pack-{pack}" in calls.out
    assert "warm_up" in calls.out
    assert "tool_use" in calls.out and f"showing calls 1-{n_calls} of {n_calls}" in calls.out
    as_json = (await cli("calls", run_id, "--json", "--pack", "2")).json()
    assert [c["pack_path"] for c in as_json["calls"]] == ["2"]
    assert as_json["calls"][0]["workflow_id"] == f"run-{run_id}/pack-2"


async def test_no_wait_then_watch_and_json_summary(cli: Cli, bbstack: Stack) -> None:
    started = await cli(
        "run",
        cli.doc(30),
        "--schema",
        cli.schema(),
        "--no-wait",
        "--json",
        "--set",
        "batching_enabled=false",
    )
    assert started.code == 0, started.err
    info = started.json()
    assert info["status"] == "started" and info["blocks"] == 30
    run_id = info["run_id"]
    # No worker polls yet: the run waits, and status says so.
    status = await cli("status", run_id, "--json")
    assert status.json()["run"]["status"] in ("created", "planning", "running")
    async with bbstack.worker():
        watched = await cli("watch", run_id, "--json")
    assert watched.code == 0, watched.err
    summary = watched.json()
    assert summary["status"] == "completed" and summary["run_id"] == run_id
    assert summary["calls"] == 31 and summary["blocks_ai_complete"] == 30  # + the warm-up
    assert summary["temporal_ui"]["run"].endswith(f"run-{run_id}")
    again = await cli("watch", run_id)  # a finished run: just the summary
    assert again.code == 0 and "completed" in again.out


async def test_ctrl_c_detaches_then_cancel_and_watch_end_cancelled(
    cli: Cli, bbstack: Stack
) -> None:
    bbstack.sim.scenario(speed_factor=1.0, latency={"ttft_ms": 300, "per_output_token_ms": 0})
    async with bbstack.worker():
        # ~100 calls one at a time, 300 ms each: still running at the first progress line.
        proc = await cli.start(
            "run",
            cli.doc(200),
            "--schema",
            cli.schema(),
            "--pack-size",
            "2",
            "--set",
            "max_concurrent_packs=1",
        )
        stdout = proc.stdout
        assert stdout is not None

        async def progress_shown() -> str:
            seen = ""
            while " blocks · " not in seen:  # a progress line: the follower is live
                line = await stdout.readline()
                assert line, seen
                seen += line.decode()
            return seen

        # One deadline for the whole start, a hang's (tests/waiting.py), not one per line:
        # 60 s for a line raced the start of the process, its ingest and its first
        # progress query on a loaded machine (it failed so beside another e2e file).
        seen = await asyncio.wait_for(progress_shown(), DEADLINE_S)
        # The simulator holds every answer from here until the cancel: the run cannot end
        # before the checks below, however slow this machine is.
        bbstack.sim.call("POST", "/_sim/hold")
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), DEADLINE_S)
        assert proc.returncode == 0, err
        run_id = cli_run_id(seen)
        assert "detached" in err.decode()
        assert f"watch {run_id}" in err.decode() and f"cancel {run_id}" in err.decode()
        status = await bbstack.pool.fetchval("select status from runs where run_id = $1", run_id)
        assert status in ("planning", "running")  # detaching left it running

        cancel = await cli("cancel", run_id)
        assert cancel.code == 0 and "cancel requested" in cancel.out
        bbstack.sim.call("POST", "/_sim/release")
        watched = await cli("watch", run_id)
    assert watched.code == 1, watched.err
    assert "cancelled" in watched.out
    row = await bbstack.pool.fetchrow(
        "select status, blocks_cancelled from runs where run_id = $1", run_id
    )
    assert row["status"] == "cancelled" and row["blocks_cancelled"] > 0
    late = await cli("cancel", run_id)
    assert late.code == 0 and "already cancelled" in late.out


def cli_run_id(out: str) -> str:
    return out.split("started run ", 1)[1].split(":", 1)[0]
