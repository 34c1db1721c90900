"""What a run shows while it runs and when it ends: its ``progress`` and the Temporal UI's
Markdown details. Pure: RunWorkflow hands in its state and sets the text it gets back."""

from __future__ import annotations

from datetime import datetime

from blockbatch.core.batch_types import BatchProgress
from blockbatch.core.budget import suggested_budget
from blockbatch.core.call_types import LimiterNote
from blockbatch.core.commands import PROG, for_any_reader
from blockbatch.core.outage import paused_text, waiting_text
from blockbatch.core.outage_types import OutageProgress
from blockbatch.core.quality import probe_cost_text, running_text
from blockbatch.core.reasons import counts_text
from blockbatch.core.run_types import RunInput, RunProgress, RunResult


def run_progress(
    state: RunInput,
    *,
    status: str,
    error: str | None = None,
    batch: BatchProgress | None = None,
    outage: OutageProgress | None = None,
    limiter: LimiterNote | None = None,
) -> RunProgress:
    """The ``progress`` query's answer from the run's state (its counters and packs)."""
    t, total = state.totals, state.block_count
    return RunProgress(
        run_id=state.run_id,
        status="waiting_for_api" if outage is not None else status,
        blocks_total=total,
        blocks_done=t.blocks_done,
        blocks_failed=t.blocks_failed,
        blocks_pending=max(total - t.blocks_done - t.blocks_failed, 0),
        packs_total=state.pack_count or 0,
        packs_done=t.packs_done,
        packs_running=len(state.running),
        calls=t.calls,
        splits=t.splits,
        input_tokens=t.input_tokens,
        output_tokens=t.output_tokens,
        cache_creation_input_tokens=t.cache_creation_input_tokens,
        cache_read_input_tokens=t.cache_read_input_tokens,
        cost_usd=round(t.cost_usd, 6),
        error=error,
        batch=batch,
        outage=outage,
        limiter=limiter,
        limiter_wait_s=round(t.limiter_wait_s, 1),
        blocks_reused=t.blocks_reused,
        reuse_saved_usd=round(t.reuse_saved_usd, 6),
        quality_sampled=t.quality_sampled,
        quality_agreeing=t.quality_agreeing,
        quality_calls=t.quality_calls,
        quality_cost_usd=round(t.quality_cost_usd, 6),
        quality_gate=state.quality.text if state.quality is not None else None,
    )


def progress_details(
    p: RunProgress, *, now: datetime, budget_exhausted: bool, replanned: str | None
) -> str:
    """A running run's details: counters, then what the plan, quality gate and limiter did."""
    if p.outage is not None:
        return (
            f"**{waiting_text(p.outage, now)}** · {p.blocks_done}/{p.blocks_total} blocks done"
            f" · {p.packs_running} packs held · ${p.cost_usd:.4f}"
        )
    status = p.status
    if budget_exhausted and status == "running":
        status = "running: budget exhausted, no more packs start"
    details = (
        f"**{status}** · {p.blocks_done}/{p.blocks_total} blocks done · "
        f"{p.blocks_failed} failed · packs {p.packs_done}/{p.packs_total} "
        f"({p.packs_running} running) · {p.calls} calls · {p.splits} splits · "
        f"${p.cost_usd:.4f}"
    )
    if replanned is not None:
        details += f"\n\n{replanned}"
    if p.quality_sampled or p.quality_calls:
        details += (
            f"\n\n{running_text(p.quality_agreeing, p.quality_sampled)} · "
            + probe_cost_text(p.quality_calls, p.quality_cost_usd, p.cost_usd)
        )
    if p.quality_gate is not None:
        details += f"\n\n{p.quality_gate}"
    return for_any_reader(
        details + _reused_line(p.blocks_reused, p.reuse_saved_usd) + _limiter_line(p)
    )


def result_details(result: RunResult, p: RunProgress, probes: int) -> str:
    """A finished run's details: its outcome, then outages, reasons, budget, quality."""
    details = (
        f"**{result.status}** · {result.blocks_ai_complete}/{result.blocks_total} "
        f"blocks ok · {result.blocks_failed} failed · {result.blocks_cancelled} "
        f"cancelled · {result.calls} calls · {result.split_events} splits · "
        f"${result.cost_usd:.4f}"
    )
    details += _reused_line(result.blocks_reused, result.reuse_saved_usd)
    if result.outages:
        details += (
            f"\n\nrode out {result.outages} outage(s) of the API: paused "
            f"{paused_text(result.paused_s)}, {probes} probe(s)"
        )
    if result.failure_reasons:
        details += "\n\nnot done: " + counts_text(result.failure_reasons)
    if result.budget is not None:
        details += (
            f"\n\n**budget exhausted**: {result.budget.blocks_left} blocks "
            f"left, about ${result.budget.to_finish_usd or 0:.4f} to finish; "
            f"continue with `{PROG} retry {result.run_id} --max-cost "
            f"{suggested_budget(result.budget):.2f}`"
        )
    if result.error:
        details += f"\n\n{result.error}"
    for change in result.plan_changes:
        details += f"\n\n{change}"
    if result.quality is not None:
        qr = result.quality
        details += (
            f"\n\n{qr.text} · "
            + probe_cost_text(
                qr.probe_calls,
                qr.probe_cost_usd,
                qr.run_cost_usd,
                max_share=qr.probe_max_share,
                capped=qr.sample_capped,
                gated=qr.min_agreement is not None,
            )
            + (f" · pack size {qr.pack_size}" if qr.pack_size else "")
        )
    return for_any_reader(details + _limiter_line(p))


def _reused_line(reused: int, saved: float) -> str:
    return f"\n\n{reused} blocks reused from earlier runs (saved ${saved:.4f})" if reused else ""


def _limiter_line(p: RunProgress) -> str:
    return "" if p.limiter is None else "\n\n" + p.limiter.text(p.limiter_wait_s)
