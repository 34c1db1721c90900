"""Human-readable run summaries, shared by the starter and the demo."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import asyncpg

from blockbatch.core.budget import left_text, suggested_budget
from blockbatch.core.claude_errors import fatal_code_of
from blockbatch.core.commands import PROG
from blockbatch.core.endpoint import answered_text
from blockbatch.core.escalation_types import EscalationVsProbe
from blockbatch.core.quality import probe_cost_text
from blockbatch.core.reasons import counts_text
from blockbatch.core.registry import UnknownModelError, Usage, cost_usd, get_model
from blockbatch.core.run_types import RunResult
from blockbatch.core.views import RetryRecord
from blockbatch.runtime.settings import Settings
from blockbatch.store.reads import baseline_inputs


async def baseline_cost(pool: asyncpg.Pool, run_id: str) -> float | None:
    """Estimated cost of the same blocks at one call per block without prompt caching.

    Every block would pay the full prompt prefix as plain input and its own output; we
    take the per-block input and output from what this run actually used, and the prefix
    from the request: its counted size, cached or not. A prefix the API did not cache is
    counted once, outside the summary (``blockbatch.api.quote.count_run_prefix``, at the
    run's end); ``None`` while its size is not known (no baseline beats a wrong one). Each
    of those calls is priced on its own (a request pays its own price tier, contract §1),
    then times the blocks. Reads Postgres only.
    """
    b = await baseline_inputs(pool, run_id)
    if b is None:
        return None
    prefix = b.prefix_tokens
    if prefix is None:
        return None
    per_block_content = (b.prompt_tokens - prefix * b.calls) / max(b.blocks_sent, 1)
    per_block_output = b.output_tokens / max(b.blocks_sent, 1)
    one_call = Usage(
        input_tokens=round(prefix + max(per_block_content, 0)),
        output_tokens=round(per_block_output),
    )
    try:
        model = get_model(b.model)
    except UnknownModelError:  # priced from configuration: not known here
        return None
    return cost_usd(model, one_call) * b.blocks_answered


def run_links(settings: Settings, run_id: str) -> dict[str, str]:
    """Temporal UI links: the run's workflow, and the list of its packs."""
    ui = settings.resolved_temporal_ui_url
    query = quote(f'BlockbatchRunId = "{run_id}"', safe="")
    return {
        "run": settings.run_url(f"run-{run_id}"),
        "packs": f"{ui}/namespaces/{settings.temporal_namespace}/workflows?query={query}",
    }


def cache_hit_ratio(result: RunResult) -> float:
    prompt = (
        result.input_tokens + result.cache_creation_input_tokens + result.cache_read_input_tokens
    )
    return result.cache_read_input_tokens / prompt if prompt else 0.0


def not_done_line(result: RunResult) -> str | None:
    """``31 failed: 28 api_unavailable, 3 invalid_value`` (None when every block is done).

    The ``cancelled`` reason is left out when it only repeats the cancelled count.
    """
    r = result
    if not r.blocks_failed and not r.blocks_cancelled:
        return None
    parts = [f"{r.blocks_failed} failed"] if r.blocks_failed else []
    if r.blocks_cancelled:
        parts.append(f"{r.blocks_cancelled} cancelled")
    line = " · ".join(parts)
    reasons = dict(r.failure_reasons)
    if reasons.get("cancelled") == r.blocks_cancelled:
        del reasons["cancelled"]
    return f"{line}: {counts_text(reasons)}" if reasons else line


def tokens_line(result: RunResult) -> str:
    """``input 1,200 · output 340 (thinking 120) · cache write 0 · cache read 5,000``."""
    r = result
    thinking = f" (thinking {r.thinking_tokens:,})" if r.thinking_tokens else ""
    return (
        f"input {r.input_tokens:,} · output {r.output_tokens:,}{thinking} · "
        f"cache write {r.cache_creation_input_tokens:,} · "
        f"cache read {r.cache_read_input_tokens:,}"
    )


def model_line(result: RunResult) -> str:
    """``claude-haiku-5-5``, and where its prices came from when not from the registry."""
    model = result.model or "unknown model"
    if result.priced_from_configuration:
        model += " (priced from configuration: BLOCKBATCH_MODEL_PRICES)"
    return model


def reused_line(result: RunResult) -> str | None:
    """``12 blocks answered by earlier runs, no call · saved $0.0312`` (None: nothing reused)."""
    r = result
    if not r.blocks_reused:
        return None
    return (
        f"{r.blocks_reused} block{'s' if r.blocks_reused != 1 else ''} answered by "
        f"earlier runs, no call · saved ${r.reuse_saved_usd:.4f}"
    )


def set_aside_line(result: RunResult) -> str | None:
    """``36 blocks set aside, not sent (headers, footers, navigation) · sending them:
    ~$0.0123`` (None: nothing set aside)."""
    r = result
    if not r.blocks_set_aside:
        return None
    return (
        f"{_count(r.blocks_set_aside, 'block')} set aside, not sent (page headers and "
        f"footers, page numbers, off-page or invisible text, navigation) · sending them: "
        f"~${r.set_aside_usd:.4f} (--include-boilerplate)"
    )


def quality_rows(result: RunResult) -> list[tuple[str, str]]:
    """The quality probe's rows: ``agreement 98.6% on 40 sampled blocks; lowest: summary
    92%``, ``quality probe: 12 calls, $0.0123 (2.1% of the run's cost)`` and the pack size the run
    settled on (none when the run probed nothing); beside them, with evidence, ``grounding
    99.4% of 1,234 values (...)``."""
    q = result.quality
    if q is None:
        return []
    grounding: list[tuple[str, str]] = []
    if q.grounding is not None:
        text = q.grounding.text
        if q.grounding.missing:
            text += f"; see `{PROG} review {result.run_id} --reason ungrounded`"
        grounding.append(("grounding", text))
    if not q.probed:
        return grounding
    if not q.sampled and not q.probe_calls and q.sample_capped:
        share = f"{100 * (q.probe_max_share or 0):g}%"
        return [
            (
                "quality",
                (
                    f"not probed: one probe call would cost more than {share} of "
                    "the run's expected cost (--set quality.probe_max_share)"
                ),
            ),
            *grounding,
        ]
    text = q.text or "no block compared"  # with its 95% CI (core.agreement.agreement_text)
    if q.failed:
        text += f"; {q.failed} probe{'s' if q.failed != 1 else ''} failed"
    if q.sampled and q.sampled > q.agreement.agreeing:
        text += f"; see `{PROG} review {result.run_id} --disagreeing`"
    rows = [
        ("quality", text),
        *grounding,
        (
            "probe",
            probe_cost_text(
                q.probe_calls,
                q.probe_cost_usd,
                q.run_cost_usd,
                max_share=q.probe_max_share,
                capped=q.sample_capped,
                gated=q.min_agreement is not None,
            ).removeprefix("quality probe: "),
        ),
    ]
    if q.pack_size:
        gate = f" (quality gate, target {q.min_agreement:.0%})" if q.gate else ""
        rows.append(("pack size", f"settled on {q.pack_size} blocks{gate}"))
    return rows


def escalation_rows(result: RunResult) -> list[tuple[str, str]]:
    """An escalation's rows: what it took and sent up (by reason), and what it cost, the
    second pass and the escalation calls apart (docs/ESCALATION.md)."""
    e = result.escalation
    if e is None:
        return []
    reasons = ", ".join(f"{n} {reason}" for reason, n in e.escalated_by_reason.items())
    with_probe = (
        f" (and {e.compared_with_probe} with the quality probe's answer alone, no second call)"
        if e.compared_with_probe
        else ""
    )
    took = (
        f"to {e.model}: {e.compared} of {_count(e.blocks, 'block')} compared in a second "
        f"packing{with_probe}, {e.kept} kept, {e.sent_up} sent up"
        + (f" ({reasons})" if reasons else "")
    )
    if e.sent_up:
        took += f"; {e.escalated} answered by {e.model}"
        if e.reused_from_probe:
            took += f" ({e.reused_from_probe} by the quality probe's call alone, not paid again)"
        if e.escalation_failed:
            took += f", {e.escalation_failed} failed (first answer kept)"
        if e.skipped:
            took += f", {e.skipped} reviewed meanwhile (left as they were)"
    if e.status == "running":
        took += " (under way)"
    elif e.status == "cancelled":
        took += f"; cancelled with {_count(e.left, 'block')} left (their first answers stay)"
    elif e.status == "failed":
        took += (
            f"; FAILED with {_count(e.left, 'block')} left (their first answers stay; the "
            f"run's error says why): go on with `{PROG} escalate {result.run_id} --to {e.model}`"
        )
    if e.status == "cancelled":
        took += f": go on with `{PROG} escalate {result.run_id} --to {e.model}`"
    spent = e.second_pass_cost_usd + e.escalation_cost_usd
    share = f" ({spent / result.cost_usd:.0%} of the run)" if result.cost_usd > 0 else ""
    cost = (
        f"second pass {_count(e.second_pass_calls, 'call')} ${e.second_pass_cost_usd:.4f} · "
        f"escalation {_count(e.escalation_calls, 'call')} ${e.escalation_cost_usd:.4f}{share}"
    )
    rows = [("escalated", took), ("escalation $", cost)]
    if e.vs_probe is not None:
        rows.append(("vs probe", vs_probe_text(e.vs_probe)))
    return rows


def vs_probe_text(v: EscalationVsProbe) -> str:
    """``on 60 sampled blocks, answers agree with claude-sonnet-5-5 alone: 91.7% before
    escalation, 98.3% after`` (docs/ESCALATION.md, "Checking it on your documents")."""
    alone = f"{v.probe_model} alone"
    if v.run_model:
        alone += " (the run's own model: blind to the mistakes it makes alone too)"
    return (
        f"on {_count(v.after.samples, 'sampled block')}, answers agree with {alone}: "
        f"{_pct(v.before.rate)} before escalation, {_pct(v.after.rate)} after"
    )


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def change_rows(changes: Sequence[str]) -> list[tuple[str, str]]:
    """The re-plans as rows: ``re-planned`` (from the answers: ``packs 1-6 as 1-3: answers so
    far are 0.65x as long as ..., so each pack takes more blocks``) or ``quality gate``."""
    rows = []
    for change in changes:
        if change.startswith("quality gate: "):
            rows.append(("quality gate", change.removeprefix("quality gate: ")))
        else:
            rows.append(("re-planned", change.replace(" re-planned", "", 1)))
    return rows


def calls_and_cache_rows(r: RunResult, calls: str) -> list[tuple[str, str]]:
    """The ``calls`` and ``cache hits`` rows. A run that sent nothing (every answer reused)
    says so, rather than ``0 calls for 0 blocks`` and a cache hit rate of 0%."""
    prompt = r.input_tokens + r.cache_creation_input_tokens + r.cache_read_input_tokens
    if r.calls == 0:
        reused = r.blocks_reused
        why = (
            f"every answer was reused from earlier runs ({_count(reused, 'block')})"
            if reused and reused >= r.blocks_ai_complete + r.blocks_failed
            else "no block was sent"
        )
        return [("calls", f"none: {why}"), ("cache hits", "none: no prompt was sent")]
    if not prompt:
        return [("calls", calls), ("cache hits", "none: no prompt tokens were counted")]
    return [
        ("calls", calls),
        ("cache hits", f"{cache_hit_ratio(r):.0%} of prompt tokens read from the cache"),
    ]


def retries_line(retries: Sequence[RetryRecord]) -> str | None:
    """``retried 1×: 4 blocks (request_rejected) → completed`` (None when never retried)."""
    if not retries:
        return None
    parts = []
    for r in retries:
        why = next(iter(r.reasons)) if len(r.reasons) == 1 else counts_text(r.reasons)
        end = r.final_status or "running"
        took = f" in {r.duration_s:.1f}s" if r.duration_s is not None else ""
        parts.append(
            f"{r.block_count} block{'s' if r.block_count != 1 else ''} ({why}) → {end}{took}"
        )
    return f"retried {len(retries)}×: " + "; ".join(parts)


def retries_data(retries: Sequence[RetryRecord]) -> list[dict[str, Any]]:
    """The run's retries as data (``--json``)."""
    return [r.model_dump(mode="json") | {"duration_s": r.duration_s} for r in retries]


def next_command(result: RunResult) -> str | None:
    """The command to run next, given how the run ended (None while it is not finished)."""
    r, run = result, result.run_id
    if r.budget is not None:
        return f"{PROG} retry {run} --max-cost {suggested_budget(r.budget):.2f}"
    if r.status == "failed" and fatal_code_of(r.error) in ("spend_limit", "billing"):
        # The account stopped the run (its error says how to fix it); then the blocks it
        # left, cancelled, go again.
        return f"{PROG} retry {run} --cancelled, once the limit or billing is fixed"
    if r.status in ("completed", "completed_with_failures") and not r.blocks_failed:
        return f"{PROG} review {run}, then {PROG} confirm {run}"
    # `retry --cancelled` takes the failed blocks and the cancelled ones.
    again = f"{PROG} retry {run}" + (" --cancelled" if r.blocks_cancelled else "")
    if r.blocks_failed:
        return f"{PROG} review {run} --failed, then {again}"
    if r.blocks_cancelled:
        return again
    if r.status == "failed":
        return f"{PROG} calls {run}"
    return None


def _count(n: int, noun: str) -> str:
    """``1 pack``, ``4 packs``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _saving(cost: float, baseline: float) -> str:
    """``70% saved``, ``4% more``, or ``about the same`` when it rounds to 0%."""
    saved = 1 - cost / baseline
    if round(saved * 100) == 0:
        return "about the same"
    return f"{saved:.0%} saved" if saved > 0 else f"{-saved:.0%} more"


def summary_dict(
    result: RunResult,
    *,
    baseline: float | None,
    links: dict[str, str],
    duration_s: float | None = None,
    retries: Sequence[RetryRecord] = (),
) -> dict[str, Any]:
    """The summary as data (``--json``)."""
    return {
        **result.model_dump(mode="json"),
        "next": next_command(result),
        "cache_hit_ratio": round(cache_hit_ratio(result), 4),
        "baseline_cost_usd": round(baseline, 6) if baseline is not None else None,
        "simulated": result.simulated,
        "duration_s": round(duration_s, 3) if duration_s is not None else None,
        "retries": retries_data(retries),
        "temporal_ui": links,
    }


def summary_lines(
    result: RunResult,
    *,
    baseline: float | None,
    links: dict[str, str],
    duration_s: float | None = None,
    retries: Sequence[RetryRecord] = (),
) -> list[str]:
    """The end-of-run table the starter and the demo print (counters of the whole run,
    its retries included)."""
    r = result
    # Reused blocks were answered by earlier runs' calls, not by this run's.
    answered = r.blocks_ai_complete + r.blocks_failed - r.blocks_reused
    # The quality probe's calls ask blocks a second time: not counted per block, and the
    # row says so.
    probe_calls = r.quality.probe_calls if r.quality is not None else 0
    # So do an escalation's: they have rows of their own.
    esc_calls = (
        r.escalation.second_pass_calls + r.escalation.escalation_calls if r.escalation else 0
    )
    work_calls = r.calls - probe_calls - esc_calls
    per_call = f"{answered / work_calls:.1f} blocks per call; " if work_calls > 0 else ""
    calls = (
        f"{_count(work_calls, 'call')} for {_count(answered, 'block')} ({per_call}"
        f"{_count(r.pack_count, 'pack')}, {_count(r.split_events, 'split event')})"
    )
    if probe_calls:
        calls = f"{calls}, {_count(probe_calls, 'quality probe call')}"
    if r.escalation is not None and r.escalation.second_pass_calls:
        calls = f"{calls}, {_count(r.escalation.second_pass_calls, 'second-pass call')}"
    if r.escalation is not None and r.escalation.escalation_calls:
        calls = f"{calls}, {_count(r.escalation.escalation_calls, 'escalation call')}"
    if probe_calls or esc_calls:
        calls = f"{_count(r.calls, 'call')}: {calls}"
    calls_row, cache_row = calls_and_cache_rows(r, calls)
    cost = f"${r.cost_usd:.4f}"
    if baseline:
        cost += (
            f"   (one call per block, no caching: ${baseline:.4f}; {_saving(r.cost_usd, baseline)})"
        )
    rows = [
        ("model", model_line(r)),
        (
            "blocks",
            (
                f"{r.blocks_ai_complete} ok · {r.blocks_failed} failed · "
                f"{r.blocks_cancelled} cancelled · {r.blocks_total} total"
            ),
        ),
        calls_row,
        ("tokens", tokens_line(r)),
        cache_row,
        ("cost", cost),
    ]
    if duration_s is not None:
        rows.append(("duration", f"{duration_s:.1f}s"))
    not_done = not_done_line(r)
    if not_done:
        rows.insert(2, ("not done", not_done))
    if reused := reused_line(r):
        rows.insert(2, ("reused", reused))
    if aside := set_aside_line(r):
        rows.insert(2, ("set aside", aside))
    if r.budget is not None:
        rows.insert(2, ("budget", left_text(r.budget)))
    retried = retries_line(retries)
    if retried:
        rows.append(("retries", retried))
    rows += change_rows(r.plan_changes)
    rows += quality_rows(r)
    rows += escalation_rows(r)
    if answered_by := answered_text(r.endpoints):
        rows.insert(0, ("answered by", answered_by))
    rows += [("Temporal UI", links["run"]), ("its packs", links["packs"])]
    following = next_command(r)
    if following:
        rows.append(("next", following))
    error = r.error if r.budget is None else None  # the budget row says it
    head = (
        f"run {r.run_id}: {r.status}"
        + (f" ({error})" if error else "")
        + (" · SIMULATED answers, not Claude's" if r.simulated else "")
    )
    return [head] + [f"  {k:<12} {v}" for k, v in rows]
