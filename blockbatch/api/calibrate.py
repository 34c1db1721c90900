"""Calibration before a big run (``starter.py calibrate``, ``Blockbatch.calibrate``).

A deterministic sample of the document's blocks (:func:`blockbatch.core.agreement.sample_blocks`,
seeded by the document's id, so the same document gives the same sample) is stored as a
document of its own and run through the real pipeline once alone (one block a call) and
once at each asked pack size, all at the same time: real Temporal runs with a fixed
``pack_size``, ``reuse_answers=False`` (every call is made, and is in the ledger) and no
quality probe. Each size's answers are compared with the alone answers
(:mod:`blockbatch.core.agreement`), the recommendation follows :func:`blockbatch.core.calibration.recommend`, and
the whole document is quoted at that size and at the default sizing
(:func:`blockbatch.api.quote.estimate`). The calibration is stored (``calibrations``) so
that a quote of the same schema and model mentions it.

The packed runs' answers are kept out of reuse afterwards (they were asked at sizes meant
to find where answers go wrong); the alone answers stay reusable, so a later run of the
document does not pay for the sampled blocks again.

Everything a user can get wrong (document, schema, model, sizes, sample, target) is
checked by :func:`prepare` before anything is stored or started.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import asyncpg
from temporalio.service import RPCError

from blockbatch.api.errors import BadRequest
from blockbatch.api.inputs import SchemaSource, as_schema, with_schema_model
from blockbatch.api.quote import Document, estimate, read_document
from blockbatch.core.agreement import Sample, compare_answers, sample_blocks
from blockbatch.core.calibration import (
    DEFAULT_SAMPLE,
    DEFAULT_SIZES,
    DEFAULT_TARGET,
    Calibration,
    SizeResult,
    check_request,
    parse_sizes,
    recommend,
    size_result,
)
from blockbatch.core.ingest import ParsedBlock, document_id_for, parse_document
from blockbatch.core.models import QualityOptions, RunOptions, RunResult
from blockbatch.core.registry import get_model
from blockbatch.core.schema import SchemaSpec
from blockbatch.runtime.settings import Settings
from blockbatch.store import calibrations, overlays


class Runner(Protocol):
    """What a calibration needs of :class:`~blockbatch.api.client.Blockbatch`."""

    pool: asyncpg.Pool
    settings: Settings

    async def ingest_blocks(
        self, data: bytes, blocks: list[ParsedBlock], *, name: str, fmt: str
    ) -> str: ...

    async def add_schema(self, source: SchemaSource, name: str | None = None) -> str: ...

    async def start_run(
        self,
        document_id: str,
        schema_id: str,
        options: RunOptions | None = None,
        *,
        run_id: str | None = None,
        packs_per_history: int = 400,
        task_queue: str | None = None,
    ) -> str: ...

    async def cancel(self, run_id: str) -> Any: ...

    async def wait(self, run_id: str) -> RunResult: ...


@dataclass(frozen=True)
class CalibrationPlan:
    """A checked calibration, ready to run: nothing stored or started yet."""

    data: bytes
    name: str
    fmt: str
    blocks: list[ParsedBlock]
    spec: SchemaSpec
    model: str
    sizes: list[int]
    sample: int
    target: float
    document_id: str
    seed: str
    #: Positions (in ``blocks``) of the sampled blocks, in document order.
    chosen: list[int]

    @property
    def runs(self) -> list[int]:
        """The pack size of each run: 1 (alone), then the asked sizes."""
        return [1, *self.sizes]

    @property
    def blocks_sent(self) -> int:
        """Blocks the calibration sends in all: the sample once per run."""
        return self.sample * len(self.runs)


def prepare(
    document: Document,
    schema: SchemaSource,
    *,
    sample: int = DEFAULT_SAMPLE,
    sizes: Sequence[int] | str = DEFAULT_SIZES,
    target: float = DEFAULT_TARGET,
    model: str | None = None,
    name: str | None = None,
    fmt: str | None = None,
    text_field: str = "text",
) -> CalibrationPlan:
    """Check everything a calibration is asked, and draw its sample; creates nothing.

    Raises:
        FileNotFoundError, BadRequest, IngestError, SchemaError, UnknownModelError,
            CalibrationError: bad input, with what to give instead.
    """
    data, name, fmt = read_document(document, name=name, fmt=fmt)
    blocks = parse_document(data, fmt, text_field=text_field)
    spec = as_schema(schema)
    options = with_schema_model(
        RunOptions(model=get_model(model).id) if model else RunOptions(), spec.prompt_config.model
    )
    model_id = get_model(options.model).id
    checked_sizes = parse_sizes(sizes)
    check_request(checked_sizes, sample, len(blocks), target, spec.prompt_config.max_batch_size)
    document_id = document_id_for(fmt, data)
    seed = f"calibrate:{document_id}"
    uids = [f"{document_id}:{b.block_index}" for b in blocks]
    picked = set(sample_blocks(uids, 0.0, sample, seed))
    chosen = [i for i, uid in enumerate(uids) if uid in picked]
    return CalibrationPlan(
        data=data,
        name=name,
        fmt=fmt,
        blocks=blocks,
        spec=spec,
        model=model_id,
        sizes=checked_sizes,
        sample=sample,
        target=target,
        document_id=document_id,
        seed=seed,
        chosen=chosen,
    )


def run_options(plan: CalibrationPlan, size: int) -> RunOptions:
    """The options of the calibration's run at ``size``: a fixed pack size, every call
    made, no probe (the calibration is itself the comparison)."""
    return RunOptions(
        model=plan.model,
        pack_size=size,
        reuse_answers=False,
        quality=QualityOptions(probe_rate=0.0, probe_minimum=0),
    )


async def run_calibration(
    bb: Runner,
    plan: CalibrationPlan,
    *,
    task_queue: str | None = None,
    say: Callable[[str], None] | None = None,
) -> Calibration:
    """Run a prepared calibration to its end, store it and return it."""
    say = say or (lambda _text: None)
    sample_blocks_ = [plan.blocks[i] for i in plan.chosen]
    sample_doc = await bb.ingest_blocks(
        json.dumps(
            {
                "calibration_sample_of": plan.document_id,
                "seed": plan.seed,
                "blocks": [b.block_index for b in sample_blocks_],
            }
        ).encode(),
        [
            ParsedBlock(i, b.block_type, b.block_content, b.metadata)
            for i, b in enumerate(sample_blocks_)
        ],
        name=f"{plan.name} (calibration sample of {plan.sample} blocks)",
        fmt=plan.fmt,
    )
    schema_id = await bb.add_schema(plan.spec)
    run_ids: list[str] = []
    try:
        for size in plan.runs:
            run_ids.append(
                await bb.start_run(
                    sample_doc, schema_id, run_options(plan, size), task_queue=task_queue
                )
            )
    except BaseException:
        await _cancel_all(bb, run_ids)
        raise
    say(
        f"started {len(run_ids)} runs of the {plan.sample}-block sample (pack sizes "
        f"{', '.join(str(s) for s in plan.runs)}): {', '.join(run_ids)}"
    )
    try:
        results = await asyncio.gather(*(bb.wait(run_id) for run_id in run_ids))
    except BaseException:
        # Interrupted (Ctrl-C), or a run that could not be followed: the runs of a
        # calibration are worth nothing apart, so none is left running on.
        await _cancel_all(bb, run_ids)
        raise
    uids = [f"{plan.document_id}:{plan.blocks[i].block_index}" for i in plan.chosen]
    alone = await calibrations.run_answers(bb.pool, run_ids[0])
    sizes: list[SizeResult] = []
    for size, run_id, result in zip(plan.runs, run_ids, results, strict=True):
        answers = alone if size == 1 else await calibrations.run_answers(bb.pool, run_id)
        samples, unanswered = [], 0
        for single, packed in zip(alone, answers, strict=True):
            if single.answer is None or packed.answer is None:
                unanswered += 1
            elif size > 1:
                samples.append(
                    Sample(
                        uids[packed.block_index],
                        packed.call_size,
                        packed.position,
                        compare_answers(plan.spec, packed.answer, single.answer),
                    )
                )
        largest = max((a.call_size for a in answers), default=0)
        sizes.append(
            size_result(
                size,
                run_id,
                result.status,
                result.calls,
                result.cost_usd,
                samples,
                answered=sum(a.answer is not None for a in answers),
                unanswered=unanswered,
                largest_call=largest,
            )
        )
    await overlays.withhold_from_reuse(bb.pool, run_ids[1:])
    recommended = recommend(sizes, plan.target)
    notes: list[str] = []
    missing = plan.sample - sizes[0].answered
    if missing:
        notes.append(
            f"{missing} sampled blocks got no answer alone (run {run_ids[0]}: "
            f"{results[0].status}); they are left out of every rate"
        )
    # The whole document, every block sent (the alone answers just stored would otherwise
    # be quoted as reused).
    at_size = RunOptions(model=plan.model, pack_size=recommended or 1, reuse_answers=False)
    at_default = RunOptions(model=plan.model, reuse_answers=False)
    quote_at, quote_default = await asyncio.gather(
        *(
            estimate(
                plan.data,
                plan.spec,
                options,
                name=plan.name,
                fmt=plan.fmt,
                blocks=plan.blocks,
                settings=bb.settings,
                pool=bb.pool,
            )
            for options in (at_size, at_default)
        )
    )
    calibration = Calibration(
        calibration_id=f"cal-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}",
        document=plan.name,
        document_id=plan.document_id,
        schema_name=plan.spec.name,
        schema_id=schema_id,
        model=plan.model,
        sample=plan.sample,
        seed=plan.seed,
        target=plan.target,
        sizes=sizes,
        recommended=recommended,
        cost_at_recommended_usd=quote_at.sync.cost_usd,
        cost_at_default_usd=quote_default.sync.cost_usd,
        default_blocks_per_pack=quote_default.blocks_per_pack,
        cost_usd=sum(r.cost_usd for r in sizes),
        created_at=datetime.now(UTC),
        notes=notes,
    )
    await calibrations.save(bb.pool, calibration, sample_doc)
    return calibration


async def _cancel_all(bb: Runner, run_ids: Sequence[str]) -> None:
    """Ask every run of a calibration to stop; best effort (the error that brought us
    here is the one to report)."""
    for run_id in run_ids:
        try:
            await bb.cancel(run_id)
        except (BadRequest, RPCError, OSError, asyncpg.PostgresError):
            continue  # its workflow already ended, or Temporal is gone: the next one
