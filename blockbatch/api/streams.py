"""Streams in the API: :meth:`Blockbatch.open_stream` and the :class:`Stream` it returns.

    async with await Blockbatch.connect() as bb:
        stream = await bb.open_stream("extract.json", max_wait_s=2.0)
        await stream.put({"id": "a1", "text": "..."})        # returns once durable
        await stream.put_many([{"text": "..."}, ...])
        await stream.close()                                 # drain, then the run ends
        async for row in stream.results():                   # as rows finish
            print(row.key, row.ok, row.value or row.reason)

Acceptance is Postgres, not a Temporal Update: a put returns once its rows and their
pending overlays are committed (``blockbatch.store.streams.append_rows``), so a producer that dies
afterwards loses nothing, the rows (data) stay out of the workflow's history, and a put is
accepted while the workflow is busy or continuing as new. The workflow is then nudged by
a ``rows_added`` signal (coalesced: at most one per :data:`NUDGE_EVERY_S`); it does not
need it to be correct. A key per row (``put(row, key=...)``) makes a re-put after a crash
harmless: the row already accepted under that key is returned, not stored again. A row
with the text of one the stream holds already (the same answer key: text, prompt, model;
not its key or other fields) is stored, but not sent: it takes that row's answer, and its
usage says ``reused`` (``blockbatch.store.streams``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import asyncpg
from temporalio.client import Client
from temporalio.service import RPCError

from blockbatch.api.errors import InvalidRow, StreamClosed, speaks_python
from blockbatch.core.context import RunContext
from blockbatch.core.endpoint import Endpoint
from blockbatch.core.run_types import ACTIVE_STATUSES, RunResult
from blockbatch.core.streams import RowError, row_metadata, row_text
from blockbatch.core.workflow_names import CLOSE_STREAM, ROWS_ADDED, run_workflow_id
from blockbatch.store import streams
from blockbatch.store.runs import load_run_context


class StreamOwner(Protocol):
    """What a stream needs of its :class:`~blockbatch.api.client.Blockbatch`."""

    pool: asyncpg.Pool

    async def temporal(self) -> Client: ...

    async def answering_endpoint(self, task_queue: str | None = None) -> Endpoint | None: ...

    async def wait(self, run_id: str) -> RunResult: ...

    async def cancel(self, run_id: str) -> Any: ...


#: The workflow is nudged at most this often by one producer (its signals are coalesced).
NUDGE_EVERY_S = 0.2
#: How often a waiting put (backpressure) and the results iterator look at Postgres.
POLL_S = 0.2


@dataclass(frozen=True)
class StreamRow:
    """One row's result: its answer (``ok``) or a reason-coded error, and its share of the
    call that answered it (tokens by kind, ``cost_usd``)."""

    index: int
    key: str | None
    ok: bool
    value: dict[str, Any] | None = None
    reason: str | None = None
    error: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The row as the CLI's ``stream`` prints it (one JSON line)."""
        out: dict[str, Any] = {
            "id": self.key if self.key is not None else self.index,
            "index": self.index,
            "ok": self.ok,
        }
        if self.ok:
            out["value"] = self.value
        else:
            out["error"] = {"reason": self.reason, "error": self.error}
        out["usage"] = self.usage
        return out


@speaks_python
class Stream:
    """A durable stream: put rows, close, read results. Get one from
    :meth:`Blockbatch.open_stream` (new) or :meth:`Blockbatch.stream` (existing)."""

    @property
    def renders_errors(self) -> bool:
        """Whether an error's advice is worded for a Python caller: as its Blockbatch's."""
        return bool(getattr(self._bb, "renders_errors", True))

    def __init__(
        self, bb: StreamOwner, info: streams.StreamInfo, ctx: RunContext, client: Client | None
    ) -> None:
        self._bb = bb
        self.info = info
        self._ctx = ctx
        self._client = client
        self._unsignalled = 0
        self._last_nudge = 0.0
        self._nudger: asyncio.Task[None] | None = None

    @property
    def run_id(self) -> str:
        """The stream's run id (the CLI's ``watch``, ``export`` and ``cancel`` take it)."""
        return self.info.run_id

    # ------------------------------------------------------------------ putting rows

    async def put(self, row: Any, *, key: str | None = None) -> int:
        """Accept one row (a JSON object with the stream's text field, or a string);
        returns its index once committed. Waits while the stream holds more than
        ``max_buffered`` rows not done (backpressure).

        Raises:
            InvalidRow: the row has no text (reason ``invalid_row``); nothing is stored.
            StreamClosed: the stream was closed, cancelled or has finished.
        """
        return (await self.put_many([row], keys=None if key is None else [key]))[0]

    async def put_many(
        self, rows: Sequence[Any], *, keys: Sequence[str | None] | None = None
    ) -> list[int]:
        """Accept ``rows`` all together (one transaction) or none; their indexes.

        ``keys``: the producer's key of each row; a key the stream holds already returns
        the row accepted under it instead of storing it again.
        """
        if keys is not None and len(keys) != len(rows):
            raise InvalidRow(f"{len(keys)} keys for {len(rows)} rows")
        parsed = []
        for pos, row in enumerate(rows):
            try:
                text = row_text(row, self.info.text_field)
            except RowError as err:
                raise InvalidRow(f"row {pos}: {err}", err.reason, pos) from None
            key = keys[pos] if keys is not None else None
            parsed.append(
                streams.Row(
                    text, row_metadata(row, self.info.text_field), None if key is None else str(key)
                )
            )
        if not parsed:
            return []
        await self._room_for(len(parsed))
        # Earlier answers stand in only for the endpoint the stream's workers call.
        endpoint = await self._bb.answering_endpoint()
        async with self._bb.pool.acquire() as conn:
            try:
                indexes = await streams.append_rows(conn, self._ctx, parsed, endpoint)
            except streams.StreamClosed as err:
                raise StreamClosed(str(err)) from None
        self._nudge(len(parsed))
        return indexes

    async def _room_for(self, n: int) -> None:
        """Backpressure: wait while buffered + in-flight rows would exceed max_buffered."""
        limit = self.info.triggers.max_buffered
        while True:
            held = await streams.in_flight(self._bb.pool, self.run_id)
            if held == 0 or held + n <= limit:
                return
            info = await streams.info(self._bb.pool, self.run_id)
            if info.closed or info.status not in ACTIVE_STATUSES:
                raise StreamClosed(
                    f"stream {self.run_id} is "
                    f"{'closed' if info.closed else info.status}: it accepts "
                    "no more rows"
                )
            await asyncio.sleep(POLL_S)

    def _nudge(self, count: int) -> None:
        self._unsignalled += count
        if self._nudger is None or self._nudger.done():
            self._nudger = asyncio.get_running_loop().create_task(self._send_nudge())

    async def _send_nudge(self) -> None:
        wait = self._last_nudge + NUDGE_EVERY_S - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        count, self._unsignalled = self._unsignalled, 0
        self._last_nudge = time.monotonic()
        await self._signal(ROWS_ADDED, count)

    async def _signal(self, name: str, *args: Any) -> None:
        if self._client is None:
            self._client = await self._bb.temporal()
        # The workflow ended (cancelled) or Temporal is briefly away: the rows are accepted
        # in Postgres either way, and the workflow looks there on its own.
        with contextlib.suppress(RPCError):
            await self._client.get_workflow_handle(run_workflow_id(self.run_id)).signal(name, *args)

    async def flush(self) -> None:
        """Send the pending nudge now (close and leaving do this)."""
        if self._nudger is not None and not self._nudger.done():
            await self._nudger

    # ------------------------------------------------------------------ closing

    async def close(self) -> bool:
        """Accept no more rows; what is buffered drains and the run ends with its summary
        (:meth:`wait`). True if this call closed it (False: closed already)."""
        await self.flush()
        async with self._bb.pool.acquire() as conn:
            closed = await streams.close(conn, self.run_id)
        await self._signal(CLOSE_STREAM)
        return closed

    async def wait(self) -> RunResult:
        """Wait for the stream's run to end (after :meth:`close`); its summary."""
        await self.flush()
        return await self._bb.wait(self.run_id)

    async def cancel(self) -> None:
        """Stop the stream: no new call starts, rows not done end ``cancelled``."""
        await self._bb.cancel(self.run_id)

    # ------------------------------------------------------------------ results

    async def results(self, *, ordered: bool = False, start: int = 0) -> AsyncIterator[StreamRow]:
        """Every row's result as it finishes, from row ``start`` on; ends once the stream
        is closed (or its run has ended) and every accepted row was yielded.

        ``ordered``: in input order (a row waits for those before it); default: in order
        of completion. Results are read from Postgres, so a new process (a producer that
        restarted) can read them again from any row.
        """
        low, delivered = start, set[int]()
        while True:
            rows = await streams.finished_rows(
                self._bb.pool, self.run_id, low, sorted(i for i in delivered if i >= low)
            )
            if ordered:
                ready = {r.block_index: r for r in rows}
                nxt = low
                while nxt in ready or nxt in delivered:
                    if nxt in ready:
                        yield _row(ready[nxt])
                        delivered.add(nxt)
                    nxt += 1
            else:
                for r in rows:
                    yield _row(r)
                    delivered.add(r.block_index)
            while low in delivered:
                delivered.discard(low)
                low += 1
            info = await streams.info(self._bb.pool, self.run_id)
            ended = info.closed or info.status not in ACTIVE_STATUSES
            if ended and low >= info.rows:
                return
            if len(rows) < 2000:
                await asyncio.sleep(POLL_S)


def _row(r: streams.RowResult) -> StreamRow:
    return StreamRow(
        index=r.block_index,
        key=r.key,
        ok=r.value is not None,
        value=r.value,
        reason=r.reason,
        error=r.error,
        usage=r.usage,
        metadata=r.metadata,
    )


async def load_stream(bb: StreamOwner, run_id: str) -> Stream:
    """An existing stream by its run id (a producer that restarted)."""
    info = await streams.info(bb.pool, run_id)
    async with bb.pool.acquire() as conn:
        ctx = await load_run_context(conn, run_id)
    return Stream(bb, info, ctx, None)
