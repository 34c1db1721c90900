"""The control endpoints (/_sim/*), /health and the ``python -m blockbatch.simulator`` process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anthropic
import pytest_asyncio

from blockbatch.simulator.testing import make_blocks, pack_params
from tests.simulator.sdk import sdk_client
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[2]


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_health(sim, http):
    async with http.get(f"{sim.base_url}/health") as response:
        assert response.status == 200
        assert await response.json() == {"status": "ok"}
        assert response.headers["request-id"].startswith("req_")


async def test_put_scenario_replaces_and_validates(sim, http):
    url = f"{sim.base_url}/_sim/scenario"
    async with http.put(url, json={"seed": 4, "errors": {"rate_529": 0.5}}) as response:
        assert response.status == 200
    async with http.get(url) as response:
        current = await response.json()
    assert current["seed"] == 4 and current["errors"]["rate_529"] == 0.5
    assert current["faults"]["skip_block"] == 0.0  # replaced, defaults elsewhere

    for bad in ({"errors": {"rate_529": 2}}, {"sedd": 1}, {"truncation_mode": "half"}, [1]):
        async with http.put(url, json=bad) as response:
            body = await response.json()
            assert response.status == 400
            assert body["error"]["type"] == "invalid_request_error"
            assert body["error"]["message"].startswith("invalid scenario: ")
    async with http.put(url, data=b"{not json") as response:
        assert response.status == 400
    async with http.get(url) as response:
        assert (await response.json())["seed"] == 4


async def test_patch_scenario_changes_only_what_it_names(sim, http):
    url = f"{sim.base_url}/_sim/scenario"
    async with http.put(url, json={"seed": 4, "errors": {"rate_529": 0.5}}) as response:
        assert response.status == 200
    patch = {"errors": {"account_error": "billing_error"}, "today": "2026-12-01"}
    async with http.patch(url, json=patch) as response:
        assert response.status == 200
        current = await response.json()
    assert current["seed"] == 4 and current["errors"]["rate_529"] == 0.5
    assert current["errors"]["account_error"] == "billing_error"
    assert current["today"] == "2026-12-01"
    for bad in ({"errors": {"account_error": "broke"}}, [1]):
        async with http.patch(url, json=bad) as response:
            assert response.status == 400
            assert (await response.json())["error"]["message"].startswith("invalid scenario: ")
    async with http.get(url) as response:
        assert (await response.json())["errors"]["account_error"] == "billing_error"


async def test_stats_requests_log_and_reset(sim, http):
    client = sdk_client(sim.base_url, "sk-do-not-log")
    message = await client.messages.create(**pack_params(make_blocks(3), system_repeat=300))
    with contextlib.suppress(anthropic.NotFoundError):
        await client.messages.create(
            model="xyz", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )

    async with http.get(f"{sim.base_url}/_sim/stats") as response:
        stats = await response.json()
    assert stats["requests"]["POST /v1/messages"] == {"200": 1, "404": 1}
    assert stats["tokens"]["output"] == message.usage.output_tokens
    assert stats["tokens"]["cache_creation"] == message.usage.cache_creation_input_tokens
    assert stats["cache"] == {"hits": 0, "misses": 1}
    assert stats["stop_reasons"] == {"tool_use": 1}

    async with http.get(f"{sim.base_url}/_sim/requests") as response:
        log = await response.json()
        raw = json.dumps(log)
    assert [entry["status"] for entry in log] == [200, 404]
    first = log[0]
    assert first["block_uids"] == ["doc:0", "doc:1", "doc:2"]
    assert first["stop_reason"] == "tool_use"
    assert first["usage"]["output_tokens"] == message.usage.output_tokens
    assert first["model"] == "claude-sonnet-4-6" and isinstance(first["time"], float)
    assert set(first) == {
        "request_id",
        "time",
        "model",
        "status",
        "block_uids",
        "stop_reason",
        "usage",
        "faults",
    }
    assert "sk-do-not-log" not in raw

    async with http.get(f"{sim.base_url}/_sim/requests?limit=1") as response:
        assert [entry["status"] for entry in await response.json()] == [404]
    async with http.get(f"{sim.base_url}/_sim/requests?limit=x") as response:
        assert response.status == 400

    async with http.post(f"{sim.base_url}/_sim/reset") as response:
        assert response.status == 200
    async with http.get(f"{sim.base_url}/_sim/requests") as response:
        assert await response.json() == []
    again = await client.messages.create(**pack_params(make_blocks(3), system_repeat=300))
    assert again.usage.cache_read_input_tokens == 0, "reset clears the cache"


async def test_unknown_route_is_a_404_in_the_api_shape(sim, http):
    async with http.get(f"{sim.base_url}/v1/nothing") as response:
        body = await response.json()
    assert response.status == 404
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_process_entry_point_serves_and_stops_on_sigterm(tmp_path):
    port = free_port()
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"seed": 7}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "blockbatch.simulator",
        "--port",
        str(port),
        "--scenario",
        str(scenario),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=20)
        assert f"127.0.0.1:{port}" in line.decode()
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/health") as response:
                assert await response.json() == {"status": "ok"}
            async with http.get(f"http://127.0.0.1:{port}/_sim/scenario") as response:
                assert (await response.json())["seed"] == 7
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=10) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_bad_scenario_file_exits_with_a_message(tmp_path):
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"speed": 1}))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "blockbatch.simulator",
        "--port",
        "0",
        "--scenario",
        str(scenario),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=20)
    assert process.returncode != 0
    assert b"speed" in stderr


async def test_hold_keeps_ready_answers_back_until_released(sim, http):
    client = sdk_client(sim.base_url)
    async with http.post(f"{sim.base_url}/_sim/hold") as response:
        assert await response.json() == {"holding": True, "held": 0}
    calls = [
        asyncio.create_task(client.messages.create(**pack_params(make_blocks(2, start=i))))
        for i in (0, 10)
    ]

    async def held() -> bool:
        async with http.get(f"{sim.base_url}/_sim/hold") as response:
            return bool((await response.json())["held"] == 2)

    await until(held, "both answers held")
    assert not any(call.done() for call in calls)
    async with http.post(f"{sim.base_url}/_sim/release") as response:
        assert await response.json() == {"holding": False, "released": 2}
    answers = await asyncio.gather(*calls)
    assert [answer.type for answer in answers] == ["message", "message"]
    async with http.get(f"{sim.base_url}/_sim/hold") as response:
        assert await response.json() == {"holding": False, "held": 0}
