"""Calibration before a big run (the CLI's ``calibrate``, ``Blockbatch.calibrate``).

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

Across models (``models``, ``calibrate --models``): the alone run is on the reference
model (``reference``; default: the candidate with the highest output price), and each
candidate model runs the sample at every size; each candidate's sizes are compared with
the reference's alone answers, each (model, size) is quoted on the whole document, and
:func:`blockbatch.core.calibration.cheapest_choice` picks the cheapest pair that meets the
target (:func:`run_model_calibration`). Each candidate's result is stored as a calibration
of its own, so a quote of the schema on that model names it.

Everything a user can get wrong (document, schema, models, sizes, sample, target) is
checked by :func:`prepare` before anything is stored or started.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import asyncpg
from temporalio.service import RPCError

from blockbatch.api.errors import BadRequest, parse_checked
from blockbatch.api.inputs import SchemaSource, as_schema, with_schema_model
from blockbatch.api.quote import Document, estimate, read_document
from blockbatch.core.agreement import Sample, compare_answers, sample_blocks
from blockbatch.core.calibration import (
    DEFAULT_MODELS_SAMPLE,
    DEFAULT_SAMPLE,
    DEFAULT_SIZES,
    DEFAULT_TARGET,
    Calibration,
    CalibrationError,
    ModelCalibration,
    SizeResult,
    cheapest_choice,
    check_request,
    escalated_result,
    parse_models,
    parse_sizes,
    recommend,
    second_positions,
    size_result,
)
from blockbatch.core.ingest import ParsedBlock, document_id_for
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.quote import Quote
from blockbatch.core.registry import get_model
from blockbatch.core.run_types import RunOptions, RunResult
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
    #: The model whose alone answers every size is compared with (the reference).
    model: str
    sizes: list[int]
    sample: int
    target: float
    document_id: str
    seed: str
    #: Positions (in ``blocks``) of the sampled blocks, in document order.
    chosen: list[int]
    #: The candidate models of a calibration across models (empty: ``model`` alone).
    models: tuple[str, ...] = ()
    #: ``--escalation``: also measure each candidate but the reference escalated to it.
    escalation: bool = False

    @property
    def candidates(self) -> list[str]:
        """The models run at every size."""
        return list(self.models) or [self.model]

    @property
    def runs(self) -> list[int]:
        """The pack size of each run: 1 (alone), then the asked sizes."""
        return [1, *self.sizes]

    @property
    def model_runs(self) -> list[tuple[str, int]]:
        """Each run's model and pack size: the reference alone, then every candidate at
        every size."""
        return [(self.model, 1), *((m, s) for m in self.candidates for s in self.sizes)]

    @property
    def second_runs(self) -> list[tuple[str, int]]:
        """``--escalation``: each run of the sample in a second packing (every candidate
        but the reference, at every size)."""
        if not self.escalation:
            return []
        return [(m, s) for m in self.candidates if m != self.model for s in self.sizes]

    @property
    def blocks_sent(self) -> int:
        """Blocks the calibration sends in all: the sample once per run."""
        return self.sample * (len(self.model_runs) + len(self.second_runs))


def prepare(
    document: Document,
    schema: SchemaSource,
    *,
    sample: int | None = None,
    sizes: Sequence[int] | str = DEFAULT_SIZES,
    target: float = DEFAULT_TARGET,
    model: str | None = None,
    name: str | None = None,
    fmt: str | None = None,
    text_field: str = "text",
    skip_empty: bool = False,
    models: Sequence[str] | str | None = None,
    reference: str | None = None,
    escalation: bool = False,
) -> CalibrationPlan:
    """Check everything a calibration is asked, and draw its sample; creates nothing.

    ``models``: calibrate across these candidate models against ``reference`` alone
    (default: ``model`` when given, else the candidate with the highest output price).
    ``sample``: default :data:`DEFAULT_SAMPLE`, :data:`DEFAULT_MODELS_SAMPLE` across models.
    ``escalation``: also measure each candidate but the reference escalated to the
    reference (:func:`blockbatch.core.calibration.escalated_result`).

    Raises:
        FileNotFoundError, BadRequest, IngestError, SchemaError, UnknownModelError,
            CalibrationError: bad input, with what to give instead.
    """
    data, name, fmt = read_document(document, name=name, fmt=fmt)
    blocks = parse_checked(data, fmt, text_field=text_field, skip_empty=skip_empty)
    spec = as_schema(schema)
    options = with_schema_model(
        RunOptions(model=get_model(model).id) if model else RunOptions(), spec.prompt_config.model
    )
    model_id = get_model(options.model).id
    if sample is None:
        sample = DEFAULT_MODELS_SAMPLE if models is not None else DEFAULT_SAMPLE
    candidates: tuple[str, ...] = ()
    if models is not None:
        candidates = tuple(dict.fromkeys(get_model(m).id for m in parse_models(models)))
        if reference is None and model is None:
            reference = max(candidates, key=lambda m: get_model(m).price_output)
        model_id = get_model(reference or model_id).id
    elif reference is not None:
        raise CalibrationError(
            "--reference needs --models: give the candidate models to compare with it"
        )
    if escalation and not [m for m in candidates if m != model_id]:
        raise CalibrationError(
            "--escalation needs --models with a model other than the reference "
            f"({model_id}): e.g. --models claude-haiku-5-5,{model_id}"
        )
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
        models=candidates,
        escalation=escalation,
    )


def run_options(plan: CalibrationPlan, size: int, model: str | None = None) -> RunOptions:
    """The options of the calibration's run at ``size`` on ``model`` (default: the
    reference): a fixed pack size, every call made, no probe (the calibration is itself
    the comparison)."""
    return RunOptions(
        model=model or plan.model,
        pack_size=size,
        reuse_answers=False,
        quality=QualityOptions(probe_rate=0.0, probe_minimum=0),
    )


@dataclass(frozen=True)
class _Ran:
    """A calibration's runs, finished: each run's model, size, id and result, the
    sample document and the stored schema."""

    sample_doc: str
    schema_id: str
    runs: list[tuple[str, int, str, RunResult]]
    #: ``--escalation``: the runs of the sample in a second packing (``plan.second_runs``).
    second: list[tuple[str, int, str, RunResult]] = field(default_factory=list)


async def _run_sample(
    bb: Runner, plan: CalibrationPlan, task_queue: str | None, say: Callable[[str], None]
) -> _Ran:
    """Store the sample as a document (and, with ``--escalation``, once per size in the
    second packing's order) and run it at every (model, size) of the plan, all at once, to
    their end (cancelling them all when interrupted)."""
    sample_blocks_ = [plan.blocks[i] for i in plan.chosen]

    async def store(order: list[int], second: int | None) -> str:
        meta: dict[str, object] = {
            "calibration_sample_of": plan.document_id,
            "seed": plan.seed,
            "blocks": [sample_blocks_[i].block_index for i in order],
        }
        name = f"{plan.name} (calibration sample of {plan.sample} blocks)"
        if second is not None:
            meta["second_packing_of_size"] = second
            name = f"{plan.name} (calibration sample of {plan.sample} blocks, second packing)"
        return await bb.ingest_blocks(
            json.dumps(meta).encode(),
            [
                ParsedBlock(k, b.block_type, b.block_content, b.metadata, b.provenance)
                for k, b in enumerate(sample_blocks_[i] for i in order)
            ],
            name=name,
            fmt=plan.fmt,
        )

    sample_doc = await store(list(range(len(sample_blocks_))), None)
    seconds = {
        size: await store(second_positions(len(sample_blocks_), size), size)
        for size in dict.fromkeys(s for _, s in plan.second_runs)
    }
    schema_id = await bb.add_schema(plan.spec)
    starts = [(m, s, sample_doc) for m, s in plan.model_runs]
    starts += [(m, s, seconds[s]) for m, s in plan.second_runs]
    run_ids: list[str] = []
    try:
        for model, size, doc in starts:
            run_ids.append(
                await bb.start_run(
                    doc, schema_id, run_options(plan, size, model), task_queue=task_queue
                )
            )
    except BaseException:
        await _cancel_all(bb, run_ids)
        raise
    shapes = ", ".join(f"{m} x {s}" if plan.models else str(s) for m, s in plan.model_runs)
    if plan.second_runs:
        shapes += "; in a second packing: " + ", ".join(f"{m} x {s}" for m, s in plan.second_runs)
    say(
        f"started {len(run_ids)} runs of the {plan.sample}-block sample (pack sizes "
        f"{shapes}): {', '.join(run_ids)}"
    )
    try:
        results = await asyncio.gather(*(bb.wait(run_id) for run_id in run_ids))
    except BaseException:
        # Interrupted (Ctrl-C), or a run that could not be followed: the runs of a
        # calibration are worth nothing apart, so none is left running on.
        await _cancel_all(bb, run_ids)
        raise
    runs = [
        (model, size, run_id, result)
        for (model, size, _), run_id, result in zip(starts, run_ids, results, strict=True)
    ]
    first = len(plan.model_runs)
    return _Ran(sample_doc=sample_doc, schema_id=schema_id, runs=runs[:first], second=runs[first:])


async def _size_results(
    bb: Runner, plan: CalibrationPlan, ran: _Ran
) -> dict[tuple[str, int], SizeResult]:
    """Each run's :class:`SizeResult`: its answers compared with the alone run's."""
    uids = [f"{plan.document_id}:{plan.blocks[i].block_index}" for i in plan.chosen]
    alone = await calibrations.run_answers(bb.pool, ran.runs[0][2])
    out: dict[tuple[str, int], SizeResult] = {}
    for index, (model, size, run_id, result) in enumerate(ran.runs):
        answers = alone if index == 0 else await calibrations.run_answers(bb.pool, run_id)
        samples, unanswered = [], 0
        for single, packed in zip(alone, answers, strict=True):
            if single.answer is None or packed.answer is None:
                unanswered += 1
            elif index > 0:
                samples.append(
                    Sample(
                        uids[packed.block_index],
                        packed.call_size,
                        packed.position,
                        compare_answers(plan.spec, packed.answer, single.answer),
                    )
                )
        out[(model, size)] = size_result(
            size,
            run_id,
            result.status,
            result.calls,
            result.cost_usd,
            samples,
            answered=sum(a.answer is not None for a in answers),
            unanswered=unanswered,
            largest_call=max((a.call_size for a in answers), default=0),
        )
    await overlays.withhold_from_reuse(
        bb.pool, [run_id for _, _, run_id, _ in [*ran.runs[1:], *ran.second]]
    )
    return out


async def _escalation_results(
    bb: Runner, plan: CalibrationPlan, ran: _Ran, by_run: dict[tuple[str, int], SizeResult]
) -> dict[tuple[str, int], SizeResult]:
    """``--escalation``: each second-packing run with its first-packing run, as escalated
    to the reference (:func:`escalated_result`; no escalation call is made, the reference's
    alone answers are in)."""
    uids = [f"{plan.document_id}:{plan.blocks[i].block_index}" for i in plan.chosen]
    alone = await calibrations.run_answers(bb.pool, ran.runs[0][2])
    first_ids = {(m, s): run_id for m, s, run_id, _ in ran.runs}
    out: dict[tuple[str, int], SizeResult] = {}
    for model, size, run_id, result in ran.second:
        first = await calibrations.run_answers(bb.pool, first_ids[(model, size)])
        second_rows = await calibrations.run_answers(bb.pool, run_id)
        # The second run's block k is the sample's block order[k].
        second: list[dict[str, Any] | None] = [None] * len(uids)
        for k, place in enumerate(second_positions(len(uids), size)):
            second[place] = second_rows[k].answer
        second_size = size_result(
            size,
            run_id,
            result.status,
            result.calls,
            result.cost_usd,
            [],
            answered=sum(a is not None for a in second),
            unanswered=0,
            largest_call=max((a.call_size for a in second_rows), default=0),
        )
        out[(model, size)] = escalated_result(
            plan.spec,
            size,
            by_run[(model, size)],
            second_size,
            uids,
            [(f.answer, two, a.answer) for f, two, a in zip(first, second, alone, strict=True)],
            [(f.call_size, f.position) for f in first],
            to=plan.model,
        )
    return out


async def _whole_cost(bb: Runner, plan: CalibrationPlan, options: RunOptions) -> Quote:
    """The whole document quoted with ``options``, every block sent (the alone answers
    just stored would otherwise be quoted as reused)."""
    return await estimate(
        plan.data,
        plan.spec,
        options,
        name=plan.name,
        fmt=plan.fmt,
        blocks=plan.blocks,
        settings=bb.settings,
        pool=bb.pool,
    )


def _alone_notes(plan: CalibrationPlan, alone: SizeResult) -> list[str]:
    missing = plan.sample - alone.answered
    if not missing:
        return []
    note = (
        f"{missing} sampled blocks got no answer alone (run {alone.run_id}: "
        f"{alone.status}); they are left out of every rate"
    )
    return [note]


def _calibration_id() -> str:
    return f"cal-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


async def run_calibration(
    bb: Runner,
    plan: CalibrationPlan,
    *,
    task_queue: str | None = None,
    say: Callable[[str], None] | None = None,
) -> Calibration:
    """Run a prepared calibration of one model to its end, store it and return it."""
    if plan.models:
        raise CalibrationError("a calibration across models runs with run_model_calibration")
    ran = await _run_sample(bb, plan, task_queue, say or (lambda _text: None))
    by_run = await _size_results(bb, plan, ran)
    sizes = [by_run[(plan.model, size)] for size in plan.runs]
    recommended = recommend(sizes, plan.target)
    at_size = RunOptions(model=plan.model, pack_size=recommended or 1, reuse_answers=False)
    at_default = RunOptions(model=plan.model, reuse_answers=False)
    quote_at, quote_default = await asyncio.gather(
        _whole_cost(bb, plan, at_size), _whole_cost(bb, plan, at_default)
    )
    calibration = Calibration(
        calibration_id=_calibration_id(),
        document=plan.name,
        document_id=plan.document_id,
        schema_name=plan.spec.name,
        schema_id=ran.schema_id,
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
        notes=_alone_notes(plan, sizes[0]),
    )
    await calibrations.save(bb.pool, calibration, ran.sample_doc)
    return calibration


async def run_model_calibration(
    bb: Runner,
    plan: CalibrationPlan,
    *,
    task_queue: str | None = None,
    say: Callable[[str], None] | None = None,
) -> ModelCalibration:
    """Run a prepared calibration across models to its end, store each candidate's
    result (one ``calibrations`` row per model) and return the whole."""
    ran = await _run_sample(bb, plan, task_queue, say or (lambda _text: None))
    by_run = await _size_results(bb, plan, ran)
    escalated = await _escalation_results(bb, plan, ran, by_run)
    alone = by_run[(plan.model, 1)]
    # The whole document at every (model, size), the reference alone, and each model's
    # default sizing: quoted at once (each quote counts its own tokens).
    pairs = [(m, s) for m in plan.candidates for s in plan.sizes]
    asked = [
        *(RunOptions(model=m, pack_size=s, reuse_answers=False) for m, s in pairs),
        RunOptions(model=plan.model, pack_size=1, reuse_answers=False),
        *(RunOptions(model=m, reuse_answers=False) for m in plan.candidates),
    ]
    quotes = await asyncio.gather(*(_whole_cost(bb, plan, o) for o in asked))
    whole = {pair: q.sync.cost_usd for pair, q in zip(pairs, quotes[: len(pairs)], strict=True)}
    alone_usd = quotes[len(pairs)].sync.cost_usd
    defaults = dict(zip(plan.candidates, quotes[len(pairs) + 1 :], strict=True))
    group, now = _calibration_id(), datetime.now(UTC)
    notes = _alone_notes(plan, alone)
    per_model: list[Calibration] = []
    for model in plan.candidates:
        sizes = [
            alone.model_copy(update={"whole_cost_usd": alone_usd}),
            *(
                by_run[(model, s)].model_copy(update={"whole_cost_usd": whole[(model, s)]})
                for s in plan.sizes
            ),
        ]
        recommended = recommend(sizes, plan.target)
        # Escalated: two passes on the model, the share sent up alone on the reference.
        up = [
            escalated[(model, s)].model_copy(
                update={
                    "whole_cost_usd": 2 * whole[(model, s)]
                    + alone_usd * escalated[(model, s)].sent_up / max(1, len(plan.chosen))
                }
            )
            for s in plan.sizes
            if (model, s) in escalated
        ]
        per_model.append(
            Calibration(
                calibration_id=f"{group}:{model}",
                document=plan.name,
                document_id=plan.document_id,
                schema_name=plan.spec.name,
                schema_id=ran.schema_id,
                model=model,
                sample=plan.sample,
                seed=plan.seed,
                target=plan.target,
                sizes=sizes,
                recommended=recommended,
                cost_at_recommended_usd=(
                    whole[(model, recommended)] if recommended is not None else None
                ),
                cost_at_default_usd=defaults[model].sync.cost_usd,
                default_blocks_per_pack=defaults[model].blocks_per_pack,
                cost_usd=sum(r.cost_usd for r in sizes),
                created_at=now,
                notes=notes,
                reference_model=plan.model if model != plan.model else None,
                escalation=up,
                escalation_recommended=recommend(up, plan.target) if up else None,
            )
        )
    choice = cheapest_choice(per_model)
    if choice is not None:
        chosen = next(
            r
            for c in per_model
            if c.model == choice.model
            for r in (c.escalation if choice.escalate_to else c.sizes)
            if r.size == choice.size
        )
        if chosen.ci_low is not None and chosen.ci_low < plan.target:
            notes = [
                *notes,
                (
                    f"a sample of {plan.sample} cannot rule out that {choice.model} at size "
                    f"{choice.size} misses {plan.target:.1%} (95% CI {chosen.ci_low:.1%}-"
                    f"{(chosen.ci_high or 1):.1%}); a larger --sample narrows it"
                ),
            ]
    result = ModelCalibration(
        calibration_id=group,
        document=plan.name,
        schema_name=plan.spec.name,
        reference_model=plan.model,
        sample=plan.sample,
        target=plan.target,
        calibrations=per_model,
        choice=choice,
        reference_alone_usd=alone_usd,
        cost_usd=sum(r.cost_usd for r in by_run.values())
        + sum(r.cost_usd - by_run[k].cost_usd for k, r in escalated.items()),
        created_at=now,
        notes=notes,
    )
    for calibration in per_model:
        await calibrations.save(bb.pool, calibration, ran.sample_doc)
    return result


async def _cancel_all(bb: Runner, run_ids: Sequence[str]) -> None:
    """Ask every run of a calibration to stop; best effort (the error that brought us
    here is the one to report)."""
    for run_id in run_ids:
        try:
            await bb.cancel(run_id)
        except (BadRequest, RPCError, OSError, asyncpg.PostgresError):
            continue  # its workflow already ended, or Temporal is gone: the next one
