"""``llm_batch``: run a schema over a list of items and get one result per item, in order.

    from blockbatch.api import llm_batch

    out = llm_batch(["first text", {"text": "second", "id": 7}], "extract.json")
    for item in out:
        print(item.index, item.ok, item.value or item.error)

Items are strings, or dicts whose ``text_field`` holds the text (other keys travel along as
block metadata). The run needs a worker polling the task queue (``make worker``), or pass
``with_worker=True`` to run one inside this process for the duration of the call (handy in
notebooks; it uses a private task queue, so it only serves this run). In a notebook or any
running event loop, prefer ``await allm_batch(...)``.

When some items fail, the result says so: ``out.all_succeeded``, ``out.successes``,
``out.error_count``, and ``print(out.error_report())`` groups the errors by reason code
(``item.reason``). When every item fails, :class:`~blockbatch.api.errors.AllItemsFailed`
is raised; its ``errors`` are the per-item results and its ``result`` the whole batch.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, overload

from blockbatch.api.client import Blockbatch
from blockbatch.api.errors import AllItemsFailed
from blockbatch.api.inputs import SchemaSource, as_schema
from core.ingest import IngestError, ParsedBlock
from core.models import RunOptions, RunResult
from runtime.settings import Settings, load_settings
from runtime.temporal import anthropic_client, build_worker

Item = str | dict[str, Any]


@dataclass(frozen=True)
class ItemResult:
    """The outcome for one input item: ``value`` when ``ok``, else ``error``."""

    index: int
    ok: bool
    value: dict[str, Any] | None
    error: str | None
    block_uid: str | None
    status: str
    #: Why the item has no result: the block's reason code (core/reasons.py), ``skipped``
    #: for an item with empty text, None when ``ok`` (or no code was recorded).
    reason: str | None = None


@dataclass(frozen=True)
class BatchResult(Sequence[ItemResult]):
    """One :class:`ItemResult` per input item, in input order, plus the run's figures."""

    run_id: str
    run: RunResult
    items: list[ItemResult]

    @overload
    def __getitem__(self, i: int) -> ItemResult: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[ItemResult]: ...
    def __getitem__(self, i: int | slice) -> ItemResult | Sequence[ItemResult]:
        return self.items[i]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[ItemResult]:
        return iter(self.items)

    @property
    def values(self) -> list[dict[str, Any] | None]:
        return [r.value for r in self.items]

    @property
    def errors(self) -> list[ItemResult]:
        """The items without a result, in input order."""
        return [r for r in self.items if not r.ok]

    @property
    def successes(self) -> list[ItemResult]:
        """The items with a result, in input order."""
        return [r for r in self.items if r.ok]

    @property
    def error_count(self) -> int:
        return sum(1 for r in self.items if not r.ok)

    @property
    def all_succeeded(self) -> bool:
        """Whether every item has a result."""
        return all(r.ok for r in self.items)

    def errors_by_reason(self) -> dict[str, list[ItemResult]]:
        """Failed items grouped by reason code (``unknown``: none recorded), most first."""
        groups: dict[str, list[ItemResult]] = {}
        for r in self.errors:
            groups.setdefault(r.reason or "unknown", []).append(r)
        return dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))

    def error_report(self, examples: int = 2) -> str:
        """The errors grouped by reason with counts and up to ``examples`` messages each.

        ``""`` when every item succeeded.
        """
        groups = self.errors_by_reason()
        if not groups:
            return ""
        head = (f"{self.error_count} of {len(self.items)} items failed "
                f"(run {self.run_id}, {self.run.status}):")
        lines = [head]
        for code, items in groups.items():
            lines.append(f"  {len(items)} {code}")
            for r in items[:examples]:
                lines.append(f"    item {r.index}: {r.error}")
            if len(items) > examples:
                lines.append(f"    ... and {len(items) - examples} more")
        return "\n".join(lines)


def items_to_blocks(
    items: Sequence[Item], text_field: str = "text"
) -> tuple[bytes, list[ParsedBlock], dict[int, str]]:
    """(source bytes, blocks, {index: why skipped}); each block remembers its item_index."""
    blocks: list[ParsedBlock] = []
    skipped: dict[int, str] = {}
    for i, item in enumerate(items):
        record = {text_field: item} if isinstance(item, str) else dict(item)
        text = record.pop(text_field, None)
        if not isinstance(text, str):
            if text is not None or not isinstance(item, dict):
                raise IngestError(f"item {i}: {text_field!r} must be a string, got "
                                  f"{type(text).__name__}")
            raise IngestError(f"item {i} has no {text_field!r} key; its keys: "
                              f"{', '.join(map(repr, record)) or '(none)'}")
        if not text.strip():
            skipped[i] = "the item's text is empty: nothing was sent to the model"
            continue
        if "\x00" in text:
            raise IngestError(f"item {i} contains a NUL character, which cannot be stored")
        block_type = str(record.pop("block_type", None) or "item")
        blocks.append(ParsedBlock(block_index=len(blocks), block_type=block_type,
                                  block_content=text, metadata={**record, "item_index": i}))
    if not blocks:
        raise IngestError("no item has any text: nothing to run")
    data = "\n".join(json.dumps(it, sort_keys=True, default=str) for it in items).encode()
    return data, blocks, skipped


async def allm_batch(
    items: Sequence[Item],
    schema: SchemaSource,
    *,
    options: RunOptions | None = None,
    text_field: str = "text",
    name: str = "items",
    with_worker: bool = False,
    bb: Blockbatch | None = None,
    settings: Settings | None = None,
    **option_fields: Any,
) -> BatchResult:
    """Run ``schema`` over ``items`` and wait; see the module docstring.

    Args:
        items: strings, or dicts holding the text under ``text_field``.
        schema: a schema dict, JSON text, or a path to a schema file.
        options: run options; ``option_fields`` (``model=``, ``pack_size=``,
            ``batching_enabled=``, ``mode=`` ...) override single fields.
        with_worker: run a worker in this process (private task queue) while waiting.
        bb: an open :class:`Blockbatch` to use; default: connect from ``settings``.

    Raises:
        AllItemsFailed: no item got a result (it carries the per-item errors).
    """
    spec = as_schema(schema)
    data, blocks, skipped = items_to_blocks(items, text_field)
    unknown = sorted(set(option_fields) - set(RunOptions.model_fields))
    if unknown:
        raise TypeError(f"unknown run option(s) {', '.join(unknown)}; see RunOptions")
    opts = RunOptions.model_validate({**(options or RunOptions()).model_dump(), **option_fields})
    own = bb is None
    if bb is None:
        bb = await Blockbatch.connect(settings, pool_size=25 if with_worker else 4)
    try:
        doc = await bb.ingest_blocks(data, blocks, name=name, fmt="items")
        schema_id = await bb.add_schema(spec)
        if not with_worker:
            run_id = await bb.start_run(doc, schema_id, opts)
            run = await bb.wait(run_id)
        else:
            queue = f"{bb.settings.temporal_task_queue}-inproc-{uuid.uuid4().hex[:8]}"
            llm = anthropic_client(bb.settings)
            try:
                async with build_worker(await bb.temporal(), queue, bb.pool, llm):
                    run_id = await bb.start_run(doc, schema_id, opts, task_queue=queue)
                    run = await bb.wait(run_id)
            finally:
                await llm.close()
        page = await bb.review(run_id, limit=len(blocks) + 1)
    finally:
        if own:
            await bb.close()
    results: dict[int, ItemResult] = {
        i: ItemResult(index=i, ok=False, value=None, error=why, block_uid=None,
                      status="skipped", reason="skipped") for i, why in skipped.items()
    }
    for row in page.items:
        i = int(row.metadata["item_index"])
        ok = row.status in ("ai_complete", "confirmed")
        results[i] = ItemResult(
            index=i, ok=ok, value=row.staging if ok else None,
            error=None if ok else (row.last_error or f"block ended {row.status}"),
            block_uid=row.block_uid, status=row.status,
            reason=None if ok else row.reason_code,
        )
    out = BatchResult(run_id=run_id, run=run, items=[results[i] for i in range(len(items))])
    if not out.successes:
        raise AllItemsFailed(out)
    return out


def llm_batch(items: Sequence[Item], schema: SchemaSource, **kwargs: Any) -> BatchResult:
    """Blocking form of :func:`allm_batch` (same arguments, except ``bb``).

    Inside a running event loop (a notebook cell) it runs on a helper thread; there,
    ``await allm_batch(...)`` is the better choice.
    """
    kwargs.setdefault("settings", load_settings())
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(allm_batch(items, schema, **kwargs))
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, allm_batch(items, schema, **kwargs)).result()
