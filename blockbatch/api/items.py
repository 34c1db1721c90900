"""``llm_batch``: many questions, or one schema over many items, one result per item, in order.

Questions (no schema): each prompt is a question answered in plain text, with its own
optional context (``contexts[i]`` goes with ``prompts[i]``)::

    from blockbatch.api import llm_batch

    out = llm_batch(["What is 2+2?", "Name a colour."])
    print(out.values)  # ['4', 'green']: each item.value is the answer

    out = llm_batch(["Summarise.", "List the dates."], [chapter_1, chapter_2], max_parallel=8)

Several questions still share one call (a pack): each is answered under its own id and
checked like a block (a missing or extra answer is a mapping failure, the pack is halved),
through the same pipeline as a document (ingest, ``RunWorkflow``, ``ProcessPack``, the
ledger) with the built-in schema :data:`blockbatch.core.questions.QUESTION_SCHEMA` (one string field,
``answer``). The request says that every question is answered on its own from its own
context, and that an instruction in one question never applies to another
(blockbatch/core/prompt.py). An identical question (same context, same model) answered before is
reused, not asked again, like any block; ``reuse_answers=False`` asks again.

A schema: each item is data, and each ``item.value`` is the overlay (a dict)::

    out = llm_batch(["first text", {"text": "second", "id": 7}], schema="extract.json")
    out = llm_batch(["first text"], "extract.json")  # the call style before questions

How positional arguments map: the first is ``prompts`` (the questions, or the items with a
schema); the second is ``contexts`` when it is a list or tuple, and the schema when it is
a dict, a ``SchemaSpec``, a str (JSON text or a file path) or a ``Path``, so
``llm_batch(items, schema)`` keeps working. Everything else is by keyword.

Items with a schema are strings, or dicts whose ``text_field`` holds the text (other keys
travel along as block metadata). ``max_parallel`` caps the calls in flight
(``RunOptions.max_concurrent_packs``; the fleet's rate limiter may admit fewer),
``model=None`` is the schema's model or the default model, and any other ``RunOptions``
field may be passed by name (``pack_size=``, ``mode="batch"``, ``max_cost_usd=`` ...).
The quality probe is off here unless asked for (``quality=QualityOptions(probe_rate=0.03)``).

The run needs a worker polling the task queue (``make worker``, or a deployment's workers),
or pass ``with_worker=True`` to run one inside this process for the duration of the call
(handy in notebooks and scripts; it uses a private task queue, so it only serves this run).
Without one, the call warns (:class:`~blockbatch.api.errors.NoWorker`, as the CLI does) and
waits for a worker to come. ``timeout=`` (seconds) bounds the wait: past it,
:class:`~blockbatch.api.errors.RunTimedOut` names the run, which keeps going on the shared
queue (follow or cancel it by id) or, with ``with_worker=True``, is cancelled, since no
other worker serves its private queue. In a notebook or any running event loop, prefer
``await allm_batch(...)``.

Each item carries its share of the run's usage (``item.usage``: tokens and cost, each
call split over its blocks by their estimated tokens; store.reads.ItemUsage). When some
items fail, the result says so: ``out.all_succeeded``, ``out.successes``,
``out.error_count``, and ``print(out.error_report())`` groups the errors by reason code
(``item.reason``). When every item fails, :class:`~blockbatch.api.errors.AllItemsFailed`
is raised; its ``errors`` are the per-item results and its ``result`` the whole batch.
Bad input (no prompts, a prompt that is not a string, contexts that do not pair with the
prompts) raises before anything is stored; an empty prompt is that item's ``skipped``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from blockbatch.api.client import Blockbatch
from blockbatch.api.errors import (
    AllItemsFailed,
    NoWorker,
    RunTimedOut,
    SimulatedAnswers,
    for_python,
)
from blockbatch.api.inputs import SchemaSource, as_schema
from blockbatch.core.commands import PROG
from blockbatch.core.endpoint import answered_text
from blockbatch.core.ingest import IngestError, ParsedBlock
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.questions import ANSWER_FIELD, QUESTION_SCHEMA, question_block
from blockbatch.core.run_types import RunOptions, RunResult
from blockbatch.core.schema import SchemaSpec
from blockbatch.core.views import GridRow, ItemUsage
from blockbatch.runtime.claude import anthropic_client
from blockbatch.runtime.settings import Settings, load_settings
from blockbatch.store.reads import item_usage
from blockbatch.store.review import MAX_PAGE

Item = str | dict[str, Any]


@dataclass(frozen=True)
class ItemResult:
    """The outcome for one input item: ``value`` when ``ok``, else ``error``.

    ``value`` is the answer (a str) for a question, the overlay (a dict) with a schema.
    """

    index: int
    ok: bool
    value: Any
    error: str | None
    block_uid: str | None
    status: str
    #: Why the item has no result: the block's reason code (blockbatch/core/reasons.py), ``skipped``
    #: for an item with empty text, None when ``ok`` (or no code was recorded).
    reason: str | None = None
    #: The item's share of the run's calls (tokens by kind, cost, calls it was sent in).
    usage: ItemUsage = field(default_factory=ItemUsage)


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
    def simulated(self) -> bool:
        """Whether any answer is the simulator's, not Claude's (``run.endpoints`` says whose;
        the call warned :class:`~blockbatch.api.errors.SimulatedAnswers`)."""
        return self.run.simulated

    @property
    def values(self) -> list[Any]:
        """Each item's value (answer or overlay), ``None`` where it failed, in input order."""
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
        head = (
            f"{self.error_count} of {len(self.items)} items failed "
            f"(run {self.run_id}, {self.run.status}):"
        )
        lines = [head]
        for code, items in groups.items():
            lines.append(f"  {len(items)} {code}")
            lines.extend(f"    item {r.index}: {r.error}" for r in items[:examples])
            if len(items) > examples:
                lines.append(f"    ... and {len(items) - examples} more")
        return "\n".join(lines)


def items_to_blocks(
    items: Sequence[Item], text_field: str = "text"
) -> tuple[bytes, list[ParsedBlock], dict[int, str]]:
    """(source bytes, blocks, {index: why skipped}); each block remembers its item_index."""
    _check_list(items, "items")
    blocks: list[ParsedBlock] = []
    skipped: dict[int, str] = {}
    for i, item in enumerate(items):
        record = {text_field: item} if isinstance(item, str) else dict(item)
        text = record.pop(text_field, None)
        if not isinstance(text, str):
            if text is not None or not isinstance(item, dict):
                raise IngestError(
                    f"item {i}: {text_field!r} must be a string, got {type(text).__name__}"
                )
            raise IngestError(
                f"item {i} has no {text_field!r} key; its keys: "
                f"{', '.join(map(repr, record)) or '(none)'}"
            )
        if not text.strip():
            skipped[i] = "the item's text is empty: nothing was sent to the model"
            continue
        if "\x00" in text:
            raise IngestError(f"item {i} contains a NUL character, which cannot be stored")
        block_type = str(record.pop("block_type", None) or "item")
        blocks.append(
            ParsedBlock(
                block_index=len(blocks),
                block_type=block_type,
                block_content=text,
                metadata={**record, "item_index": i},
            )
        )
    if not blocks:
        raise IngestError("no item has any text: nothing to run")
    data = "\n".join(json.dumps(it, sort_keys=True, default=str) for it in items).encode()
    return data, blocks, skipped


def questions_to_blocks(
    prompts: Sequence[str], contexts: Sequence[str | None] | None = None
) -> tuple[bytes, list[ParsedBlock], dict[int, str]]:
    """(source bytes, blocks, {index: why skipped}) of questions and their own contexts.

    Each block is one question with its context (:func:`blockbatch.core.questions.question_block`)
    and remembers its item_index; a blank question is skipped.

    Raises:
        TypeError: ``prompts`` or ``contexts`` is not a list (or tuple).
        IngestError: no prompts, a prompt or context that is not a string (a context may
            be None), ``contexts`` not one per prompt, a NUL character, or every
            question blank.
    """
    _check_list(prompts, "prompts")
    if not prompts:
        raise IngestError("no prompts: pass a list of at least one question")
    if contexts is not None:
        _check_list(contexts, "contexts")
        if len(contexts) != len(prompts):
            raise IngestError(
                f"{len(contexts)} context{'s' if len(contexts) != 1 else ''} for "
                f"{len(prompts)} prompt{'s' if len(prompts) != 1 else ''}: pass one context "
                "(or None) per prompt, in the same order"
            )
    blocks: list[ParsedBlock] = []
    skipped: dict[int, str] = {}
    records: list[dict[str, Any]] = []
    for i, question in enumerate(prompts):
        context = contexts[i] if contexts is not None else None
        if not isinstance(question, str):
            raise IngestError(f"prompt {i} must be a string, got {type(question).__name__}")
        if context is not None and not isinstance(context, str):
            raise IngestError(f"context {i} must be a string or None, got {type(context).__name__}")
        if "\x00" in question or "\x00" in (context or ""):
            raise IngestError(f"prompt {i} contains a NUL character, which cannot be stored")
        records.append({"question": question, "context": context})
        if not question.strip():
            skipped[i] = "the question is empty: nothing was sent to the model"
            continue
        block_type, content = question_block(question, context)
        blocks.append(
            ParsedBlock(
                block_index=len(blocks),
                block_type=block_type,
                block_content=content,
                metadata={"item_index": i},
            )
        )
    if not blocks:
        raise IngestError("every prompt is empty: nothing to ask")
    data = "\n".join(json.dumps(r, ensure_ascii=False) for r in records).encode()
    return data, blocks, skipped


def _check_list(value: Any, what: str) -> None:
    if isinstance(value, str | bytes | dict) or not isinstance(value, Sequence):
        raise TypeError(
            f"{what} must be a list (or tuple), got {type(value).__name__}"
            + ("; wrap a single one in a list" if isinstance(value, str) else "")
        )


def split_arguments(
    contexts: Sequence[str | None] | SchemaSource | None, schema: SchemaSource | None
) -> tuple[Sequence[str | None] | None, SchemaSource | None]:
    """(contexts, schema) from the second positional argument and ``schema=``.

    The second positional argument is the schema when it is a dict, a SchemaSpec, a str or
    a Path (``llm_batch(items, schema)``, the call style from before question mode), else
    the contexts.

    Raises:
        TypeError: a schema given both ways.
    """
    if isinstance(contexts, dict | SchemaSpec | str | Path):
        if schema is not None:
            raise TypeError(
                "the schema is given twice (second argument and schema=); "
                "the second argument is the contexts, a list"
            )
        return None, contexts
    return contexts, schema


def run_options(
    options: RunOptions | None,
    option_fields: dict[str, Any],
    *,
    max_parallel: int | None,
    model: str | None,
) -> RunOptions:
    """``options`` with single fields overridden; ``max_parallel`` is
    ``max_concurrent_packs``, ``model=None`` leaves the model as it is.

    Raises:
        TypeError: an unknown option, or one given twice.
        pydantic.ValidationError: a value out of range (e.g. ``max_parallel=0``).
    """
    unknown = sorted(set(option_fields) - set(RunOptions.model_fields))
    if unknown:
        raise TypeError(f"unknown run option(s) {', '.join(unknown)}; see RunOptions")
    fields = dict(option_fields)
    for name, value in (("max_concurrent_packs", max_parallel), ("model", model)):
        if value is None:
            continue
        if name in fields:
            raise TypeError(f"{name} is given twice; pass max_parallel= / model= only")
        fields[name] = value
    # No quality probe unless asked for (``quality=QualityOptions(...)`` or in ``options``):
    # each item's usage is its own answer's, and a small batch would pay its minimum of
    # five single calls (README, "Quality").
    base = options or RunOptions(quality=QualityOptions(probe_rate=0.0))
    return RunOptions.model_validate({**base.model_dump(), **fields})


async def allm_batch(
    prompts: Sequence[Item],
    contexts: Sequence[str | None] | SchemaSource | None = None,
    *,
    schema: SchemaSource | None = None,
    max_parallel: int | None = None,
    model: str | None = None,
    options: RunOptions | None = None,
    text_field: str | None = None,
    name: str | None = None,
    with_worker: bool = False,
    timeout: float | None = None,
    bb: Blockbatch | None = None,
    settings: Settings | None = None,
    **option_fields: Any,
) -> BatchResult:
    """Answer ``prompts`` (or run ``schema`` over them) and wait; see the module docstring.

    Args:
        prompts: the questions (strings); with a schema, the items: strings, or dicts
            holding the text under ``text_field``.
        contexts: one context (str or None) per question; or, positionally, the schema.
        schema: a schema dict, JSON text, or a path to a schema file; None: questions.
        max_parallel: the most calls in flight (``RunOptions.max_concurrent_packs``).
        model: the model (None: the schema's, else the default model).
        options: run options; ``option_fields`` (``pack_size=``, ``batching_enabled=``,
            ``mode=`` ...) override single fields.
        text_field: with a schema, the key of a dict item's text (default ``"text"``).
        name: the document's name (default ``questions`` or ``items``).
        with_worker: run a worker in this process (private task queue) while waiting.
        timeout: the most seconds to wait for the run (None: as long as it takes).
        bb: an open :class:`Blockbatch` to use; default: connect from ``settings``.

    Warns:
        NoWorker: without ``with_worker``, no worker polls the task queue: the run waits.

    Raises:
        RunTimedOut: the run did not finish within ``timeout``; with ``with_worker`` it
            was cancelled, else it keeps going.
        AllItemsFailed: no item got a result (it carries the per-item errors).
        IngestError: bad prompts or contexts (nothing is stored).
        TypeError: arguments of the wrong kind, or an unknown run option.
    """
    contexts, schema = split_arguments(contexts, schema)
    questions = schema is None
    if questions:
        if text_field is not None:
            raise TypeError("text_field is for items with a schema; questions are strings")
        spec = as_schema(QUESTION_SCHEMA)
        data, blocks, skipped = questions_to_blocks(prompts, contexts)  # type: ignore[arg-type]  # checked inside
    else:
        if contexts is not None:
            raise TypeError(
                "contexts go with questions (no schema); with a schema, give "
                "each item as a dict and its context under another key"
            )
        spec = as_schema(schema)  # type: ignore[arg-type]  # not None here
        data, blocks, skipped = items_to_blocks(prompts, text_field or "text")
    opts = run_options(options, option_fields, max_parallel=max_parallel, model=model)
    own = bb is None
    if bb is None:
        bb = await Blockbatch.connect(settings, pool_size=25 if with_worker else 4)
    try:
        doc = await bb.ingest_blocks(
            data, blocks, name=name or ("questions" if questions else "items"), fmt="items"
        )
        schema_id = await bb.add_schema(spec)
        if not with_worker:
            queue = bb.settings.temporal_task_queue
            if not await bb.workers_polling(queue):
                warnings.warn(
                    f"no worker is polling task queue {queue!r}: the run waits until one "
                    "does (`make worker`), or pass with_worker=True to run one in this "
                    "process",
                    NoWorker,
                    stacklevel=2,
                )
            run_id = await bb.start_run(doc, schema_id, opts)
            run = await _wait(bb, run_id, timeout, cancel=False)
        else:
            # The worker's modules (every activity and workflow) load only here, where a
            # worker runs in this process: a caller with workers of its own never loads them.
            from blockbatch.runtime.temporal import build_worker

            queue = f"{bb.settings.temporal_task_queue}-inproc-{uuid.uuid4().hex[:8]}"
            llm = anthropic_client(bb.settings)
            try:
                async with build_worker(
                    await bb.temporal(),
                    queue,
                    bb.pool,
                    llm,
                    sticky_timeout=bb.settings.workflow_task_timeout,
                ):
                    run_id = await bb.start_run(doc, schema_id, opts, task_queue=queue)
                    run = await _wait(bb, run_id, timeout, cancel=True)
            finally:
                await llm.close()
        rows = await _all_rows(bb, run_id)
        usage = await item_usage(bb.pool, run_id)
    finally:
        if own:
            await bb.close()
    results: dict[int, ItemResult] = {
        i: ItemResult(
            index=i,
            ok=False,
            value=None,
            error=why,
            block_uid=None,
            status="skipped",
            reason="skipped",
        )
        for i, why in skipped.items()
    }
    for row in rows:
        i = int(row.metadata["item_index"])
        ok = row.status in ("ai_complete", "confirmed")
        value = (row.staging or {}).get(ANSWER_FIELD) if questions else row.staging
        results[i] = ItemResult(
            index=i,
            ok=ok,
            value=value if ok else None,
            error=None if ok else (row.last_error or f"block ended {row.status}"),
            block_uid=row.block_uid,
            status=row.status,
            reason=None if ok else row.reason_code,
            usage=usage.get(row.block_uid, ItemUsage()),
        )
    out = BatchResult(run_id=run_id, run=run, items=[results[i] for i in range(len(prompts))])
    if out.simulated:
        # The run id makes each call's message its own: Python's filters show it once per call.
        warnings.warn(
            f"run {run_id}: {answered_text(run.endpoints)}; set ANTHROPIC_API_KEY where "
            "the worker runs for Claude's answers",
            SimulatedAnswers,
            stacklevel=2,
        )
    if not out.successes:
        raise AllItemsFailed(out)
    return out


#: How long a timed-out run with an in-process worker gets to stop after its cancel.
_CANCEL_GRACE_S = 30.0


async def _wait(bb: Blockbatch, run_id: str, timeout: float | None, *, cancel: bool) -> RunResult:
    """The run's result, or :class:`RunTimedOut` after ``timeout`` seconds (``cancel``:
    the run is cancelled first, and given a moment to stop while this process's worker
    still serves it)."""
    try:
        return await asyncio.wait_for(bb.wait(run_id), timeout)
    except TimeoutError:
        pass
    info = await bb.run(run_id)
    done = f"{info.blocks.get('ai_complete', 0)} of {info.blocks_total} blocks done"
    if cancel:
        await bb.cancel(run_id)
        try:
            status: str = (await asyncio.wait_for(bb.wait(run_id), _CANCEL_GRACE_S)).status
        except TimeoutError:
            status = (await bb.run(run_id)).status
        raise RunTimedOut(
            f"run {run_id} did not finish within {timeout:g} s ({done}); it was cancelled "
            f"({status}): its worker ran in this process. Pass a longer timeout, or run "
            "a worker (`make worker`) and leave with_worker off",
            run_id,
            status,
        )
    raise RunTimedOut(
        for_python(
            f"run {run_id} did not finish within {timeout:g} s (it is {info.status}, {done}); "
            f"it keeps going: follow it with `{PROG} watch {run_id}`, cancel it with "
            f"`{PROG} cancel {run_id}`"
        ),
        run_id,
        info.status,
    )


def llm_batch(
    prompts: Sequence[Item],
    contexts: Sequence[str | None] | SchemaSource | None = None,
    **kwargs: Any,
) -> BatchResult:
    """Blocking form of :func:`allm_batch` (same arguments, except ``bb``).

    Inside a running event loop (a notebook cell) it runs on a helper thread; there,
    ``await allm_batch(...)`` is the better choice.
    """
    kwargs.setdefault("settings", load_settings())
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(allm_batch(prompts, contexts, **kwargs))
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, allm_batch(prompts, contexts, **kwargs)).result()


#: The name from the prior design (SPEC-26, DSPy's ``llm_query_batched``): the same function.
llm_query_batched = llm_batch


async def _all_rows(bb: Blockbatch, run_id: str) -> list[GridRow]:
    """Every block of the run next to its overlay, page after page (keyset)."""
    rows: list[GridRow] = []
    after: int | None = None
    while True:
        page = await bb.review(run_id, limit=MAX_PAGE, after=after)
        rows += page.rows
        if page.next_after is None:
            return rows
        after = page.next_after
