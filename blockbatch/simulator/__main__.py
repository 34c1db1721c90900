"""``python -m blockbatch.simulator --port PORT [--host H] [--scenario FILE.json]``."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path

from pydantic import ValidationError

from blockbatch.simulator.scenario import Scenario
from blockbatch.simulator.server import SimulatorServer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m blockbatch.simulator",
        description="Simulated Claude (Anthropic Messages API).",
    )
    parser.add_argument("--port", type=int, required=True, help="port to listen on (0 = any free)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind")
    parser.add_argument(
        "--scenario", type=Path, help="scenario JSON file (faults, latency, limits)"
    )
    return parser.parse_args(argv)


def load_scenario(path: Path | None) -> Scenario:
    """The scenario in ``path``, or the defaults; exits with a readable message if invalid."""
    if path is None:
        return Scenario()
    try:
        return Scenario.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError, ValidationError) as exc:
        sys.exit(f"simulator: cannot use scenario {path}: {exc}")


async def serve(host: str, port: int, scenario: Scenario) -> None:
    """Serve until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = SimulatorServer(host=host, port=port, scenario=scenario)
    await server.start()
    print(f"simulator listening on {server.base_url}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()
    print("simulator stopped", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    asyncio.run(serve(args.host, args.port, load_scenario(args.scenario)))


if __name__ == "__main__":
    main()
