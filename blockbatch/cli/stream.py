"""`starter.py stream`: JSONL rows in (stdin or a followed file), result JSONL out as rows finish.

Every input line gets exactly one output line: the row's answer, or ``{reason, error}``.
A line that is not JSON or has no text never reaches the stream (``invalid_row``, printed
at once); a row too large for one call fails in its pack (``oversized``); the stream goes
on either way. A row's id is its ``id`` field when it has one, else ``line:N``; with
``--resume RUN`` (a producer that died) feed the same input again: rows already accepted
are recognised by that id and not stored twice, and every finished row is printed again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from blockbatch.api.streams import Stream
from blockbatch.cli.follow import Interrupts
from blockbatch.cli.options import apply_settings
from blockbatch.cli.parser import (
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_USAGE,
    EXIT_WITH_FAILURES,
    MODEL,
    PROG,
    SEE_TOP,
    TRIGGERS,
    Subparsers,
    add_command,
    add_field_option,
    add_settings_option,
)
from blockbatch.cli.session import Session
from blockbatch.core.reasons import counts_text
from blockbatch.core.run_types import RunOptions
from blockbatch.core.streams import RowError, parse_line

#: Lines put in one transaction at most (those already read when the stream is ready).
BATCH = 200
#: How often a followed file is looked at again after its end.
FOLLOW_POLL_S = 0.2


def _opening_options(args: argparse.Namespace) -> list[str]:
    """The options given that only opening a stream takes."""
    given = [o.flag for o in (MODEL, *TRIGGERS) if getattr(args, o.dest) != o.cli_default]
    if args.schema:
        given.insert(0, "--schema")
    if args.settings:
        given.append("--set")
    return given


async def cmd_stream(args: argparse.Namespace, s: Session) -> int:
    if args.resume and (opening := _opening_options(args)):
        s.con.error(
            f"--resume continues a stream as it was opened: {', '.join(opening)} cannot change it",
            EXIT_USAGE,
        )
        return EXIT_USAGE
    if not args.resume and not args.schema:
        s.con.error("stream needs --schema SCHEMA.json (or --resume RUN_ID)", EXIT_USAGE)
        return EXIT_USAGE
    bb = await s.bb()
    if args.resume:
        stream = await bb.stream(args.resume)
    else:
        fields: dict[str, object] = {"model": args.model} if args.model else {}
        apply_settings(fields, args.settings)
        stream = await bb.open_stream(
            Path(args.schema),
            max_rows=args.max_rows,
            max_tokens=args.max_tokens,
            max_wait_s=args.max_wait,
            max_buffered=args.max_buffered,
            text_field=args.text_field,
            options=RunOptions.model_validate(fields),
        )
    err = sys.stderr
    print(
        f"stream {stream.run_id}: {'resumed' if args.resume else 'open'} "
        f"(text field {stream.info.text_field!r}); results on stdout",
        file=err,
        flush=True,
    )
    out = Output(sys.stdout)
    with Interrupts() as interrupts:  # Ctrl-C ends the input, then the stream drains
        stop = interrupts.event
        writer = asyncio.get_running_loop().create_task(
            _write_results(stream, out, ordered=args.ordered)
        )
        try:
            lines = _follow(Path(args.follow), stop) if args.follow else _stdin_lines(stop)
            invalid = await _put_lines(stream, lines, out, stop)
            await stream.close()
            await writer
            result = await stream.wait()
        finally:
            stop.set()  # ends the input's helper tasks
            if not writer.done():
                writer.cancel()
    blocks_per_call = (result.blocks_ai_complete / result.calls) if result.calls else 0.0
    reasons = counts_text(result.failure_reasons)
    print(
        f"stream {stream.run_id} {result.status}: {result.blocks_total} rows, "
        f"{result.blocks_ai_complete} ok, {result.blocks_failed} failed"
        + (f" ({reasons})" if reasons else "")
        + f", {invalid} invalid lines; {result.calls} calls "
        f"({blocks_per_call:.1f} rows/call), ${result.cost_usd:.4f}",
        file=err,
        flush=True,
    )
    if result.status == "completed" and not invalid:
        return EXIT_OK
    if result.status in ("completed", "completed_with_failures"):
        return EXIT_WITH_FAILURES
    return EXIT_RUN_FAILED


class Output:
    """One JSON line per row on stdout, written whole and flushed."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lines = 0

    def write(self, obj: dict[str, Any]) -> None:
        self.stream.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.stream.flush()
        self.lines += 1


async def _write_results(stream: Stream, out: Output, *, ordered: bool) -> None:
    async for row in stream.results(ordered=ordered):
        out.write(row.as_json())


async def _put_lines(
    stream: Stream, lines: asyncio.Queue[tuple[int, str] | None], out: Output, stop: asyncio.Event
) -> int:
    """Put every good line (in batches of what is already read); print bad ones at once.

    Returns how many lines were invalid."""
    invalid, done = 0, False
    while not done:
        item = await lines.get()
        batch: list[tuple[int, str]] = []
        while item is not None:
            batch.append(item)
            if len(batch) >= BATCH or lines.empty():
                break
            item = lines.get_nowait()
        done = item is None
        rows, keys = [], []
        for number, line in batch:
            if not line.strip():
                continue
            try:
                row, _ = parse_line(line, stream.info.text_field)
            except RowError as err:
                invalid += 1
                out.write(
                    {
                        "id": _row_id(err.row, number),
                        "line": number,
                        "ok": False,
                        "error": {"reason": err.reason, "error": str(err)},
                        "usage": {},
                    }
                )
                continue
            keys.append(_row_id(row, number))
            rows.append(row)
        if rows:
            await stream.put_many(rows, keys=keys)
    return invalid


def _row_id(row: Any, number: int) -> str:
    """A row's id: its ``id`` field, else ``line:N``."""
    rid = row.get("id") if isinstance(row, dict) else None
    return str(rid) if rid is not None else f"line:{number}"


def _stdin_lines(stop: asyncio.Event) -> asyncio.Queue[tuple[int, str] | None]:
    """Lines of stdin, numbered from 1, then ``None`` (EOF or Ctrl-C)."""
    queue: asyncio.Queue[tuple[int, str] | None] = asyncio.Queue(maxsize=10 * BATCH)
    loop = asyncio.get_running_loop()

    def read() -> None:
        for number, line in enumerate(sys.stdin, start=1):
            if stop.is_set():
                break
            asyncio.run_coroutine_threadsafe(queue.put((number, line)), loop).result()
        asyncio.run_coroutine_threadsafe(queue.put(None), loop).result()

    # A daemon thread: a blocked read of a terminal must not keep the process alive.
    threading.Thread(target=read, name="stdin", daemon=True).start()
    _keep(loop.create_task(_end_on(stop, queue)))
    return queue


def _follow(path: Path, stop: asyncio.Event) -> asyncio.Queue[tuple[int, str] | None]:
    """Lines of a growing file (``tail -f``), numbered from 1, until Ctrl-C."""
    queue: asyncio.Queue[tuple[int, str] | None] = asyncio.Queue(maxsize=10 * BATCH)

    async def read() -> None:
        number, partial = 0, ""
        with path.open(encoding="utf-8", errors="replace") as f:
            while not stop.is_set():
                chunk = f.readline()
                if not chunk:
                    await asyncio.sleep(FOLLOW_POLL_S)
                    continue
                partial += chunk
                if not partial.endswith("\n"):
                    continue  # a line still being written
                number += 1
                await queue.put((number, partial))
                partial = ""
        await queue.put(None)

    _keep(asyncio.get_running_loop().create_task(read()))
    return queue


#: The event loop holds tasks weakly: the input's readers stay here until they finish, so
#: the garbage collector cannot end one mid-stream.
_readers: set[asyncio.Task[None]] = set()


def _keep(task: asyncio.Task[None]) -> None:
    _readers.add(task)
    task.add_done_callback(_readers.discard)


async def _end_on(stop: asyncio.Event, queue: asyncio.Queue[tuple[int, str] | None]) -> None:
    """Ctrl-C: end the input (the reader keeps taking lines, so room comes)."""
    await stop.wait()
    while True:
        try:
            queue.put_nowait(None)
            return
        except asyncio.QueueFull:
            await asyncio.sleep(0.05)


def add_stream_parser(sub: Subparsers) -> None:
    """`stream`'s options."""
    stream = add_command(
        sub,
        "stream",
        "a durable stream: JSONL rows in, one result line out per row",
        "Read JSONL rows from stdin (or follow FILE with --follow, tail -f style, until "
        "Ctrl-C) into a durable stream and write one JSON line per row to stdout as rows "
        "finish: {id, index, ok, value | error: {reason, error}, usage}. A row's id is its "
        "`id` field, else `line:N`. Packs form when --max-rows rows are buffered, their "
        "estimated tokens reach --max-tokens, or the oldest waited --max-wait. A bad line "
        "(not JSON, no text) gets an `invalid_row` line and the stream goes on. At the end "
        "of the input the stream closes, drains and prints a summary to stderr. The stream "
        "is a run: watch, cancel, review and export take its id.",
        epilog="examples:\n"
        f"  producer | {PROG} stream --schema s.json --max-rows 20 --max-wait 500ms\n"
        f"  {PROG} stream --schema s.json --follow events.jsonl --ordered\n"
        f"  {PROG} stream --resume RUN_ID < events.jsonl\n\n{SEE_TOP}",
    )
    stream.add_argument(
        "--schema", metavar="SCHEMA.json", help="the schema (needed unless --resume)"
    )
    for option in TRIGGERS:
        add_field_option(stream, option)
    stream.add_argument(
        "--text-field",
        default="text",
        metavar="F",
        help="the JSON key holding each row's text (default: %(default)s)",
    )
    stream.add_argument(
        "--ordered",
        action="store_true",
        help="print results in input order (default: as rows finish)",
    )
    stream.add_argument(
        "--follow",
        metavar="FILE",
        help="follow FILE as it grows instead of reading stdin; Ctrl-C "
        "closes the stream and drains it",
    )
    stream.add_argument(
        "--resume",
        metavar="RUN_ID",
        help="continue an open stream whose producer died: feed the same "
        "input again; rows already accepted (same id) are not stored "
        "twice, and every finished row is printed",
    )
    add_field_option(stream, MODEL)
    add_settings_option(stream, "`run --help`")
