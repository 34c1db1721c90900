"""Mistakes a user can make get one clear line, a distinct exit code, and no half-made run."""

from __future__ import annotations

import asyncio

from blockbatch.devtools.stack import free_port
from tests.conftest import Stack
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`

COMMANDS = [
    "run",
    "estimate",
    "status",
    "list",
    "cancel",
    "watch",
    "review",
    "confirm",
    "export",
    "calls",
]


async def _nothing_written(s: Stack) -> None:
    for table in ("runs", "documents", "schemas"):
        assert await s.pool.fetchval(f"select count(*) from {table}") == 0, table


async def test_help_on_every_command(cli: Cli) -> None:
    top = await cli("--help")
    assert top.code == 0 and "exit codes" in top.out
    results = await asyncio.gather(*(cli(command, "--help") for command in COMMANDS))
    for command, result in zip(COMMANDS, results, strict=True):
        assert result.code == 0 and f"starter.py {command}" in result.out, command
        assert "--json" in result.out


async def test_the_process_exits_with_the_code_its_command_returned(cli: Cli) -> None:
    # The other tests run commands in-process; this one checks that `python starter.py`
    # itself leaves with each command's code (through runtime.process.exit_process) and
    # with everything it wrote flushed.
    usage = await cli.process("run", cli.doc(3))
    assert usage.code == 2 and "--schema" in usage.err
    unknown = await cli.process("status", "no-such-run", "--json")
    assert unknown.code == 3 and unknown.json()["exit_code"] == 3
    listed = await cli.process("list", "--json")
    assert listed.code == 0 and listed.json() == []


async def test_usage_errors_exit_2(cli: Cli) -> None:
    no_schema = await cli("run", cli.doc(3))
    assert no_schema.code == 2 and "--schema" in no_schema.err
    bad_number = await cli("review", "x", "--limit", "0")
    assert bad_number.code == 2 and "at least 1" in bad_number.err


async def test_missing_files_and_bad_schema_write_nothing(cli: Cli, bbstack: Stack) -> None:
    missing = await cli("run", str(cli.tmp / "nope.md"), "--schema", cli.schema())
    assert missing.code == 2
    assert missing.err.strip() == f"error: no such document file: {cli.tmp / 'nope.md'}"
    no_schema = await cli("run", cli.doc(5), "--schema", str(cli.tmp / "nope.json"))
    assert no_schema.code == 2 and "no such schema file" in no_schema.err
    bad = await cli(
        "run",
        cli.doc(5),
        "--schema",
        cli.schema("bad.json", data={"name": "bad", "properties": {"x": {}}}),
    )
    assert bad.code == 2 and "schema 'bad'" in bad.err and "prompt_config" in bad.err
    not_json = cli.tmp / "broken.json"
    not_json.write_text("{not json")
    broken = await cli("run", cli.doc(5), "--schema", str(not_json))
    assert broken.code == 2 and "not valid JSON" in broken.err
    model = await cli("run", cli.doc(5), "--schema", cli.schema(), "--model", "gpt-4")
    assert model.code == 2 and "known models" in model.err
    fmt = await cli("run", cli.doc(5, name="doc.bin"), "--schema", cli.schema())
    assert fmt.code == 2 and "--format" not in fmt.err and "extension" in fmt.err
    await _nothing_written(bbstack)


async def test_estimate_of_bad_input_exits_2_and_creates_nothing(cli: Cli, bbstack: Stack) -> None:
    schema = cli.schema()
    empty = cli.tmp / "empty.md"
    empty.write_text("  \n\n")
    results = await asyncio.gather(
        cli("estimate", cli.doc(5), "--schema", schema, "--model", "gpt-4"),
        cli("estimate", str(empty), "--schema", schema),
        cli("estimate", str(cli.tmp), "--schema", schema),  # a directory: no file to read
        cli(
            "estimate",
            cli.doc(5),
            "--schema",
            cli.schema("bad.json", data={"name": "bad", "properties": {"x": {}}}),
        ),
    )
    expected = ["known models", "document has no blocks", "is not a file", "prompt_config"]
    for result, text in zip(results, expected, strict=True):
        assert result.code == 2 and text in result.err, (text, result.err)
        assert "Traceback" not in result.err
    await _nothing_written(bbstack)
    assert "POST /v1/messages" not in bbstack.sim.stats()["requests"]


async def test_unknown_run_id_exits_3(cli: Cli) -> None:
    commands = ["status", "cancel", "watch", "review", "confirm", "export", "calls"]
    results = await asyncio.gather(*(cli(command, "no-such-run") for command in commands))
    for command, result in zip(commands, results, strict=True):
        assert result.code == 3, (command, result.err)
        assert result.err.strip() == (
            "error: no run 'no-such-run': list runs with `python starter.py list`"
        ), command
    as_json = await cli("status", "no-such-run", "--json")
    assert as_json.code == 3 and as_json.json()["exit_code"] == 3


async def test_stack_not_running_exits_4(cli: Cli, bbstack: Stack) -> None:
    closed = free_port()
    everything_down = {
        "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{closed}/x",
        "TEMPORAL_ADDRESS": f"127.0.0.1:{closed}",
    }
    for args in (["run", cli.doc(5), "--schema", cli.schema()], ["list"], ["status", "x"]):
        result = await cli(*args, timeout=120, **everything_down)
        assert result.code == 4, (args, result.err)
        assert "cannot connect to Postgres" in result.err and "make up" in result.err
        assert len(result.err.strip().splitlines()) == 1
    temporal_down = await cli(
        "run", cli.doc(5), "--schema", cli.schema(), TEMPORAL_ADDRESS=f"127.0.0.1:{closed}"
    )
    assert temporal_down.code == 4 and "cannot connect to Temporal" in temporal_down.err
    assert await bbstack.pool.fetchval("select count(*) from runs") == 0
    # Reading finished work needs only Postgres.
    assert (await cli("list", TEMPORAL_ADDRESS=f"127.0.0.1:{closed}")).code == 0


async def test_no_api_key_and_no_simulator_exits_4(cli: Cli, bbstack: Stack) -> None:
    env = {k: v for k, v in cli.env.items() if not k.startswith("ANTHROPIC_")}
    cli.env = {**env, "SIMULATOR_PORT": str(free_port())}
    result = await cli("run", cli.doc(5), "--schema", cli.schema())
    assert result.code == 4
    assert "ANTHROPIC_API_KEY" in result.err and "simulator" in result.err
    cli.env = {**env, "ANTHROPIC_BASE_URL": "http://127.0.0.1:1"}
    base_only = await cli("run", cli.doc(5), "--schema", cli.schema())
    assert base_only.code == 4 and "ANTHROPIC_API_KEY" in base_only.err
    assert await bbstack.pool.fetchval("select count(*) from runs") == 0
