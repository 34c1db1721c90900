"""A worker's Prometheus endpoint agrees with the ledger after real runs.

One ``worker.py`` process with ``METRICS_PORT`` set serves three runs: a sync run through
429s, a few 500s and truncated answers (so packs are halved), with one block Claude refuses
and one it never answers; a batch-mode run; and a run cancelled half-way. The endpoint is
then scraped over HTTP, and blockbatch's counters are compared with the ledger's rows and
the overlays (calls by purpose and status, tokens by kind, cost, API errors by status,
splits, blocks by outcome and reason); the same scrape carries the Temporal SDK's own
worker metrics, and never the API key.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import signal
import socket
import subprocess
import sys
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from blockbatch.core.run_types import RunOptions
from blockbatch.devtools.stack import free_port
from blockbatch.runtime.metrics import METRICS, status_class
from tests.conftest import ROOT, Stack
from tests.helpers import (
    REJECT_MARKER,
    TEST_BATCH_POLLS,
    block_content,
    extract_schema,
    marked_document,
)
from tests.waiting import until

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Prometheus text format -> {(name, labels): value}, without the runtime's service_name."""
    out: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, line
        labels = frozenset(
            (k, v) for k, v in _LABEL.findall(m.group(2) or "") if k != "service_name"
        )
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def by(samples: Samples, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """The samples of ``name`` keyed by the values of ``labels`` (summed over the rest)."""
    out: defaultdict[tuple[str, ...], float] = defaultdict(float)
    for (n, ls), value in samples.items():
        if n == name:
            d = dict(ls)
            out[tuple(d.get(label, "") for label in labels)] += value
    return {k: v for k, v in out.items() if v}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def start_worker(s: Stack, key: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    return s.start_worker_process(key, log, METRICS_PORT=str(port))


#: Ports tried before giving up on finding one that nothing else takes first.
PORT_TRIES = 5


async def start_serving_worker(
    s: Stack, key: str, log: Path
) -> tuple[subprocess.Popen[bytes], int]:
    """A ``worker.py`` serving its metrics on a free port; returns it and the port, once
    it serves.

    The port is chosen free (``free_port``), but another process may bind it before the
    worker does (seen under load): the worker then exits saying it cannot serve metrics
    there, and another port is tried. Serving is read from the worker's own log line,
    not from a scrape: a scrape could be answered by whatever else listens on the port.
    """
    for _ in range(PORT_TRIES):
        port = free_port()
        proc = start_worker(s, key, port, log)
        serving = f"metrics on http://127.0.0.1:{port}/metrics"

        def settled(proc: subprocess.Popen[bytes] = proc, serving: str = serving) -> str | None:
            text = log.read_text(errors="replace")
            if serving in text:
                return "serving"
            return "exited" if proc.poll() is not None else None

        if await until(settled, f"the worker serving metrics on port {port}") == "serving":
            await wait_for_endpoint(port, proc, log)
            return proc, port
        said = log.read_text(errors="replace")
        assert f"cannot serve metrics on 127.0.0.1:{port}" in said, said
    raise AssertionError(
        f"{PORT_TRIES} free ports in a row were taken before the worker bound them"
    )


async def wait_for_endpoint(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:

    def answering() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            scrape(port)
        except OSError:
            return False
        return True

    await until(answering, f"a metrics endpoint on port {port}", interval=0.1)


async def ledger(s: Stack, run_ids: list[str]) -> dict[str, dict[tuple[str, ...], float]]:
    """The same figures as the metrics, recomputed from the ledger and the overlays."""
    q = s.pool.fetch
    calls = await q(
        """select purpose, status, count(*) as n from llm_calls
                       where run_id = any($1) and status in ('succeeded', 'failed')
                       group by 1, 2""",
        run_ids,
    )
    usage = await q(
        """select purpose, sum(input_tokens) as input, sum(output_tokens) as output,
                              sum(cache_read_input_tokens) as cache_read,
                              sum(cache_creation_input_tokens) as cache_write,
                              sum(cost_usd)::float8 as cost
                       from llm_calls where run_id = any($1)
                         and status in ('succeeded', 'failed') group by 1""",
        run_ids,
    )
    errors = await q(
        """select http_status from llm_calls where run_id = any($1)
                          and status = 'failed' and purpose <> 'batch_request'
                          and error_type is distinct from 'duplicate_attempt'""",
        run_ids,
    )
    blocks = await q(
        """select status, coalesce(reason_code, '') as reason, count(*) as n
                        from overlays where run_id = any($1) group by 1, 2""",
        run_ids,
    )
    splits = await s.pool.fetchval(
        "select count(*) from split_events where run_id = any($1)", run_ids
    )
    tokens: dict[tuple[str, ...], float] = {
        (r["purpose"], kind): float(r[kind])
        for r in usage
        for kind in ("input", "output", "cache_read", "cache_write")
        if r[kind]
    }
    return {
        "calls": {(r["purpose"], r["status"]): float(r["n"]) for r in calls},
        "tokens": tokens,
        "cost": {(r["purpose"],): r["cost"] for r in usage if r["cost"]},
        "api_errors": {
            (k,): float(n)
            for k, n in Counter(status_class(r["http_status"]) for r in errors).items()
        },
        "splits": {(): float(splits)} if splits else {},
        "done": {(): float(sum(r["n"] for r in blocks if r["status"] == "ai_complete"))},
        "failed": {(r["reason"],): float(r["n"]) for r in blocks if r["status"] == "failed"},
        "cancelled": {(r["reason"],): float(r["n"]) for r in blocks if r["status"] == "cancelled"},
    }


async def test_scraped_metrics_agree_with_the_ledger_after_faulty_runs(
    bbstack: Stack, tmp_path: Path
) -> None:
    s = bbstack
    key = f"sk-ant-test-SECRET-{secrets.token_hex(12)}"
    schema_id = await s.bb.add_schema(extract_schema(instruction_words=300))
    sync_doc = await s.bb.ingest_bytes(marked_document(40, {13}), name="s.md", fmt="markdown")
    batch_doc = await s.bb.ingest_bytes(marked_document(6, {2}), name="b.md", fmt="markdown")
    s.sim.scenario(
        seed=15,
        reject_marker=REJECT_MARKER,
        batch={"processing_delay_s": 0.2},
        errors={"rate_429": 0.25, "rate_500": 0.03, "retry_after_s": 0},
        faults={"truncate": 0.25},
        # Block 30 is never answered: it fails alone, as missing_from_answer.
        always_skip_contents=[await block_content(s.pool, f"{sync_doc}:30")],
        # A 429 teaches the limiter the limits its headers show: high ones here,
        # so that calls wait for the limiter little after it.
        limits={"rpm": 50_000, "input_tpm": 50_000_000, "output_tpm": 10_000_000},
    )
    log = tmp_path / "worker.log"
    proc, port = await start_serving_worker(s, key, log)
    try:
        # 500s name no retry-after: their retries back off from 0.2 s, not 2 s.
        sync_id = await s.bb.start_run(
            sync_doc, schema_id, RunOptions(pack_size=8, call_retry_s=0.2)
        )
        sync = await asyncio.wait_for(s.bb.wait(sync_id), 150)
        # Reuse off: these documents share blocks with the first, whose answers would stand in.
        batch_id = await s.bb.start_run(
            batch_doc,
            schema_id,
            RunOptions(
                pack_size=4,
                mode="batch",
                batch=TEST_BATCH_POLLS,
                reuse_answers=False,
            ),
        )
        batch = await asyncio.wait_for(s.bb.wait(batch_id), 120)
        # A third run, cancelled once a few blocks are done: the rest end `cancelled`.
        s.sim.scenario()
        cancel_doc = await s.bb.ingest_bytes(
            marked_document(24, set()), name="c.md", fmt="markdown"
        )
        cancel_id = await s.bb.start_run(
            cancel_doc,
            schema_id,
            RunOptions(pack_size=4, max_concurrent_packs=1, reuse_answers=False),
        )

        async def four_done() -> bool:
            return bool(
                await s.pool.fetchval(
                    """select count(*) >= 4 from overlays
                       where run_id = $1 and status = 'ai_complete'""",
                    cancel_id,
                )
            )

        await until(four_done, "four blocks of the cancelled run done")
        # Answers held until the cancel has landed: the run cannot finish first.
        async with s.sim.holding("an answer of the cancelled run held in flight"):
            await s.bb.cancel(cancel_id)
        cancelled = await asyncio.wait_for(s.bb.wait(cancel_id), 60)
        text = scrape(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 40)
    assert (sync.status, batch.status) == ("completed_with_failures",) * 2
    assert cancelled.status == "cancelled" and cancelled.blocks_cancelled > 0

    samples = parse(text)
    want = await ledger(s, [sync_id, batch_id, cancel_id])
    got = {
        "calls": by(samples, "blockbatch_llm_calls_total", "purpose", "status"),
        "tokens": by(samples, "blockbatch_llm_tokens_total", "purpose", "kind"),
        "cost": {
            k: v / 1e6
            for k, v in by(samples, "blockbatch_llm_cost_microdollars_total", "purpose").items()
        },
        "api_errors": by(samples, "blockbatch_api_errors_total", "status"),
        "splits": by(samples, "blockbatch_splits_total"),
        "done": by(samples, "blockbatch_blocks_done_total"),
        "failed": by(samples, "blockbatch_blocks_failed_total", "reason"),
        "cancelled": by(samples, "blockbatch_blocks_cancelled_total", "reason"),
    }
    for figure in ("calls", "tokens", "api_errors", "splits", "done", "failed", "cancelled"):
        assert got[figure] == want[figure], figure
    assert got["cost"].keys() == want["cost"].keys()
    for purpose, usd in want["cost"].items():  # an integer counter of micro-dollars
        assert abs(got["cost"][purpose] - usd) <= 2e-6, (purpose, got["cost"], usd)

    # The faults happened and were counted: 429s, a refusal (4xx), halved packs, a
    # block that failed alone, and both modes' calls.
    assert got["api_errors"][("429",)] > 0 and got["api_errors"][("4xx",)] > 0
    assert got["splits"][()] > 0
    failed = dict(got["failed"])
    assert failed.pop(("request_rejected",)) == 2
    # Block 30, never answered, fails alone: missing from its answers, or cut off by the
    # truncate fault on its last attempt (which of the two follows the seeded dice, which
    # roll on each request's bytes).
    assert list(failed.values()) == [1]
    assert set(failed) <= {("missing_from_answer",), ("truncated",)}
    assert got["done"][()] == sum(r.blocks_ai_complete for r in (sync, batch, cancelled))
    assert got["cancelled"] == {("cancelled",): cancelled.blocks_cancelled}
    assert {p for p, _ in got["calls"]} >= {"pack", "warm_up", "batch_request"}
    assert by(samples, "blockbatch_runs_finished_total", "status") == {
        ("completed_with_failures",): 2.0,
        ("cancelled",): 1.0,
    }
    # The limiter as the latest answered call saw it.
    assert 0 < by(samples, "blockbatch_limiter_rate")[()] <= 1
    assert set(by(samples, "blockbatch_limiter_limit", "limit")) == {
        ("requests",),
        ("input",),
        ("output",),
    }
    assert by(samples, "blockbatch_limiter_wait_seconds_count")[()] == sum(
        n for (p, st), n in got["calls"].items() if p == "pack" and st == "succeeded"
    )

    # Every blockbatch metric served is documented, and all those this run must have moved
    # are there; Temporal's own worker metrics are served beside them.
    names = {n for n, _ in samples}
    documented = {
        name + suffix
        for name, metric in METRICS.items()
        for suffix in (("_bucket", "_sum", "_count") if metric.type == "histogram" else ("",))
    }
    assert {n for n in names if n.startswith("blockbatch_")} <= documented
    # Calls may not have waited for the limiter; the histogram is served as _bucket, _sum
    # and _count (its count is checked above).
    unmoved = {"blockbatch_limiter_waits_total", "blockbatch_limiter_wait_seconds"}
    assert set(METRICS) - unmoved <= names
    assert "temporal_worker_task_slots_available" in names
    assert any(n.startswith("temporal_activity_execution_latency") for n in names)
    # The dashboard's Temporal panels ask for metrics the SDK really serves.
    dashboard = (ROOT / "deploy" / "grafana" / "dashboards" / "blockbatch.json").read_text()
    assert set(re.findall(r"\b(temporal_\w+)", dashboard)) <= names
    # Labels stay few: no run id, block uid or key in any of blockbatch's samples.
    labels = {k for (n, ls), _ in samples.items() if n.startswith("blockbatch_") for k, _ in ls}
    assert labels <= {"purpose", "status", "kind", "reason", "limit", "binding", "le"}
    for secret in (key, key[-24:], sync_id, batch_id, cancel_id):
        assert secret not in text


async def test_a_metrics_port_in_use_stops_the_worker_with_a_clear_message(
    bbstack: Stack, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start_worker(bbstack, "sim-test-key", port, tmp_path / "worker.log")
        code = await asyncio.to_thread(proc.wait, 60)
    out = (tmp_path / "worker.log").read_text()
    assert code == 1, out
    assert f"error: cannot serve metrics on 127.0.0.1:{port}" in out
    assert "set METRICS_PORT to a free port" in out
    assert "Traceback" not in out


async def test_a_free_port_taken_before_the_worker_binds_it_is_replaced_by_another(
    bbstack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race `free_port` cannot close, made certain: the first port it hands out is
    # taken (listening) before the worker starts; the worker must end up serving on
    # another, its own, and not the test scrape whatever holds the first.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        first = taken.getsockname()[1]
        ports = iter([first, free_port()])
        monkeypatch.setattr(sys.modules[__name__], "free_port", lambda: next(ports))
        proc, port = await start_serving_worker(bbstack, "sim-test-key", tmp_path / "worker.log")
    try:
        assert port != first
        scrape(port)  # it answers there
        said = (tmp_path / "worker.log").read_text()
        assert f"metrics on http://127.0.0.1:{port}/metrics" in said, said
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 40)
