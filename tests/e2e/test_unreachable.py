"""An endpoint no connection reaches (issue 33 point 3): the worker says so at its start, and a
run on it ends ``failed``, reason ``unreachable``, naming the host and the cause, instead of
waiting for "the API" forever.

Two endpoints that never answer, and never any outside address: a closed local port
(refused) and a name under ``.invalid`` (RFC 2606: it never resolves). The run's limit
(``outage.unreachable_after_s``, a minute by default) is shortened to a second here; the
workflow tests (tests/workflows/test_outage_flow.py) hold the default's two minutes on the
time-skipping server.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from pathlib import Path

import pytest

from blockbatch.core.outage_types import OutageOptions
from blockbatch.runtime.temporal import build_worker
from blockbatch.send.endpoint import check_endpoint
from blockbatch.send.sdk import anthropic
from tests.conftest import Stack
from tests.e2e.test_reason_codes import codes, paragraphs, start
from tests.waiting import until


def _closed_port() -> int:
    """A local port nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _client(base_url: str, key: str = "sk-ant-test-unreachable") -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key=key, base_url=base_url, max_retries=0, timeout=10)


ENDPOINTS = [
    pytest.param("refused", "connection refused", id="closed-port"),
    pytest.param("nowhere.invalid", "does not resolve", id="invalid-name"),
]


def _base_url(kind: str) -> tuple[str, str]:
    if kind == "refused":
        host = f"127.0.0.1:{_closed_port()}"
        return f"http://{host}", host
    return f"http://{kind}", kind


@pytest.mark.parametrize(("kind", "cause"), ENDPOINTS)
async def test_a_run_on_an_unreachable_endpoint_ends_unreachable_naming_host_and_cause(
    bbstack: Stack, kind: str, cause: str
) -> None:
    base_url, host = _base_url(kind)
    options = OutageOptions(
        failures_to_pause=1, probe_initial_s=0.5, probe_max_s=1.0, unreachable_after_s=1.0
    )
    # The warm-up's three tries back off from 0.2 s, not 2 s.
    run_id, _ = await start(bbstack, paragraphs(4), pack_size=2, outage=options, call_retry_s=0.2)
    llm = _client(base_url)
    async with build_worker(bbstack.client, bbstack.task_queue, bbstack.pool, llm):
        result = await bbstack.bb.wait(run_id)
    await llm.close()
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith(f"could not connect to Claude's endpoint {host}: ")
    assert cause in result.error
    assert "HTTPS_PROXY" in result.error and "ANTHROPIC_BASE_URL" in result.error
    assert set((await codes(bbstack, run_id)).values()) == {("cancelled", "unreachable")}
    info = await bbstack.bb.run(run_id)
    assert info.status == "failed"


async def test_a_worker_says_at_its_start_whether_the_endpoint_answers(bbstack: Stack) -> None:
    for kind, cause in (("refused", "connection refused"), ("nowhere.invalid", "does not resolve")):
        base_url, host = _base_url(kind)
        llm = _client(base_url)
        endpoint, problem = await check_endpoint(llm)
        await llm.close()
        assert endpoint.host == host
        assert problem is not None and problem.startswith(f"is NOT reachable ({host}): ")
        assert cause in problem and "HTTPS_PROXY" in problem
    llm = _client(bbstack.sim.base_url, key=bbstack.settings.resolved_api_key())
    endpoint, problem = await check_endpoint(llm)
    await llm.close()
    assert endpoint.simulated and problem is None
    # Reached, but the key is refused (contract §6: 401 authentication_error).
    bbstack.sim.scenario(auth={"valid_keys": ["some-other-key"]})
    llm = _client(bbstack.sim.base_url, key="sk-ant-not-this-one")
    endpoint, problem = await check_endpoint(llm)
    await llm.close()
    assert endpoint.simulated
    assert problem is not None and problem.startswith(
        "is reachable, but the API key was rejected (401 authentication_error"
    )
    assert "ANTHROPIC_API_KEY" in problem and "sk-ant-not-this-one" not in problem


async def test_worker_py_says_in_one_line_that_its_endpoint_is_not_reachable(
    bbstack: Stack, tmp_path: Path
) -> None:
    base_url, host = _base_url("refused")
    log = tmp_path / "worker.log"
    proc = bbstack.start_worker_process("sk-ant-test", log, ANTHROPIC_BASE_URL=base_url)
    try:
        # The line comes before the worker polls.
        await until(
            lambda: "polling" in log.read_text() or proc.poll() is not None,
            "the worker polling or gone",
            interval=0.1,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 60)
    lines = [line for line in log.read_text().splitlines() if "Claude endpoint check" in line]
    assert len(lines) == 1, log.read_text()
    assert f"the Claude API via {host} is NOT reachable ({host}): connection refused" in lines[0]
    assert "HTTPS_PROXY" in lines[0] and "ANTHROPIC_BASE_URL" in lines[0]
    assert "sk-ant-test" not in log.read_text()  # never the key
