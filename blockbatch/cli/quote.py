"""`estimate` and `run --dry-run`: the quote of a run, as a table or as JSON."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Literal

from blockbatch.api.errors import EmptyRecordsSkipped
from blockbatch.api.quote import estimate
from blockbatch.cli.console import Console
from blockbatch.cli.parser import EXIT_OK
from blockbatch.cli.session import Session
from blockbatch.core.blocks import ParsedBlock
from blockbatch.core.ingest import ConvertOptions
from blockbatch.core.quote import Quote
from blockbatch.core.quote_pricing import ModeQuote
from blockbatch.core.run_types import RunOptions


def read_as(args: argparse.Namespace) -> ConvertOptions:
    """How the document is read: ``--html-all``, ``--table-rows``, ``--pptx-notes``."""
    return ConvertOptions(
        html_all=args.html_all, table_rows=args.table_rows, pptx_notes=args.pptx_notes
    )


def note_skipped(s: Session, caught: list[warnings.WarningMessage]) -> None:
    """Say which records ``--skip-empty`` left out (the API warns of them)."""
    for w in caught:
        if issubclass(w.category, EmptyRecordsSkipped):
            s.con.note(f"note: {w.message} (--skip-empty)")


async def quote_of(
    args: argparse.Namespace,
    s: Session,
    options: RunOptions,
    *,
    blocks: list[ParsedBlock] | None = None,
    count: bool = True,
    history: bool = True,
    escalate_to: str | None = None,
) -> Quote:
    """The quote of the run ``args`` describe (its file, schema and how the file is read),
    noting the records ``--skip-empty`` left out. ``blocks``: the file already parsed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", EmptyRecordsSkipped)
        q = await estimate(
            Path(args.file),
            Path(args.schema),
            options,
            fmt=args.format,
            text_field=args.text_field,
            skip_empty=args.skip_empty,
            read_as=read_as(args),
            blocks=blocks,
            settings=s.settings,
            count=count,
            history=history,
            escalate_to=escalate_to,
        )
    note_skipped(s, caught)
    return q


async def show_quote(
    args: argparse.Namespace,
    s: Session,
    options: RunOptions,
    *,
    count: bool = True,
    history: bool = True,
    cheapest: bool = False,
) -> int:
    """Quote the run ``args`` describe and print it; nothing is stored or started.
    ``cheapest``: the chosen mode is the one expected to cost less (``--mode cheapest``)."""
    q = await quote_of(
        args,
        s,
        options,
        count=count,
        history=history,
        escalate_to=getattr(args, "escalate_to", None),
    )
    if cheapest:
        q = q.model_copy(update={"mode": cheaper_mode(q)})
    if s.con.json:
        s.con.data(q.model_dump(mode="json"))
    else:
        print_quote(s.con, q)
    return EXIT_OK


def cheaper_mode(q: Quote) -> Literal["sync", "batch"]:
    """The mode the quote expects to cost less (sync on a tie: it finishes sooner)."""
    return "batch" if q.batch.cost_usd < q.sync.cost_usd else "sync"


def output_text(source: str, history: dict[str, float] | None, scope: str | None = None) -> str:
    """Where the quote's output tokens come from (its ``output_source``, ``output_history``
    and ``output_scope``), in words that read on their own: what earlier answers wrote
    against the planner's estimate of an answer's length, and what this run plans with."""
    h = history
    if source == "ledger" and h is not None:
        runs = int(h["runs"])
        return (
            f"from {runs} earlier run{'s' if runs != 1 else ''} of this schema on this "
            f"model: their {int(h['calls']):,} answers were {h['ratio']:.2f}x as long as "
            "the planner estimates, and the quote counts them at that"
        )
    if source == "other_schemas" and h is not None:
        where = "this model" if scope == "model" else "other models"
        return (
            f"no run of this schema yet: {int(h['calls']):,} answers of other schemas on "
            f"{where} were {h['ratio']:.2f}x as long as the planner estimates, and the quote "
            "counts this run's at that; the run itself starts from the planner's estimate "
            "and learns from its own answers"
        )
    return (
        "the planner's estimate of each answer's length, which the run plans with (it "
        "leans high: no earlier answer says how long this schema's answers are)"
    )


def print_quote(con: Console, q: Quote) -> None:
    """The quote as a few lines and one row per mode (the chosen one marked ``*``)."""
    con.line(
        con.style(
            f"quote: {q.blocks:,} blocks of {q.document} x {q.schema_name} on {q.model}", "bold"
        ),
        "  (nothing stored, nothing started)",
    )
    low, high = q.blocks_per_pack
    each = f"{low}" if low == high else f"{low}-{high}"
    con.line(f"  packs   {q.packs:,} ({each} blocks each), planned as the run plans them")
    if q.input_source == "count_tokens" and q.counted_by_simulator:
        source = (
            f"SIMULATED count: the simulator counted it ({q.count_requests} requests), "
            "not Claude's token-counting endpoint; Claude's count may differ"
        )
    elif q.input_source == "count_tokens":
        source = f"counted with the token-counting endpoint ({q.count_requests} requests)"
    else:
        source = "the planner's estimates (not counted)"
    con.line(
        f"  input   {source}: prefix {q.prefix_tokens:,} tokens (system prompt and "
        f"tool), blocks {q.block_tokens:,}"
    )
    con.line(f"  output  {output_text(q.output_source, q.output_history, q.output_scope)}")
    if q.thinking_per_call:
        chosen = q.chosen()
        where = "earlier runs" if q.thinking_source == "ledger" else "assumed for the effort"
        thinking_calls = chosen.calls - (1 if chosen.warm_up else 0)  # not the warm-up
        con.line(
            f"  thinks  ~{q.thinking_per_call:,} tokens a call ({where}), in OUTPUT: "
            f"{chosen.thinking_tokens:,} over {thinking_calls:,} calls; one block per "
            f"call would think {q.thinking_unpacked_tokens:,}"
        )
    cache = (
        f"prefix cached (model minimum {q.min_cacheable_tokens:,} tokens)"
        if q.sync.cached
        else f"NOT cached: prefix below the model's minimum of {q.min_cacheable_tokens:,}"
    )
    con.line(f"  cache   {cache}")
    if q.sync.probe_calls:
        con.line(
            f"  probe   sync: {q.sync.probe_calls:,} quality-probe call"
            f"{'s' if q.sync.probe_calls != 1 else ''} (blocks asked alone), "
            f"{usd(q.sync.probe_cost_usd)} expected, in the sync row; batch does not probe"
        )
    con.line()
    con.table(
        [
            "MODE",
            "CALLS",
            "INPUT",
            "CACHE WRITE",
            "CACHE READ",
            "OUTPUT",
            "EXPECTED",
            "ALL HITS",
            "AT MOST",
        ],
        [_row(m, chosen=m.mode == q.mode) for m in (q.sync, q.batch)],
        right=range(1, 9),
    )
    b = q.batch
    if b.cache_hit_rate is not None:
        con.line(
            f"  batch   cache hits are best effort: {b.cache_hit_rate:.0%} expected "
            f"({q.batch_hit_source}); every request reading {usd(b.min_cost_usd)}, every "
            f"request writing the prefix {usd(b.max_cost_usd)} at most"
        )
    if b.cost_usd > q.sync.cost_usd:
        con.line(
            con.style(
                f"  batch is expected to cost MORE than sync ({usd(b.cost_usd)} against "
                f"{usd(q.sync.cost_usd)}): half price covers input, output and cache "
                "tokens, not the cache hits sync gets every call",
                "bold",
            )
        )
    if q.calibration is not None:
        con.line(f"  {q.calibration.text()}")
    if q.escalation is not None:
        print_escalation(con, q)
    for note in q.notes:
        con.line(con.style(f"  note: {note}", "dim"))


def print_escalation(con: Console, q: Quote) -> None:
    """What ``--escalate-to`` adds (sync prices: an escalation calls synchronously)."""
    e = q.escalation
    assert e is not None
    con.line(
        f"  escalate to {e.to}: second pass on {q.model} at most {usd(e.second_pass_usd)}; "
        f"each 1% of blocks sent up alone on {e.to} {usd(e.per_percent_usd)} "
        f"(all of them {usd(e.alone_usd)})"
    )
    if e.share is not None and e.expected_usd is not None:
        con.line(
            f"  expected: {e.share:.1%} sent up ({e.share_source}): escalation "
            f"{usd(e.expected_usd)}, the run with it {usd(q.sync.cost_usd + e.expected_usd)}"
        )
    else:
        con.line(
            con.style(
                "  how many go up is not measured yet: `calibrate --models "
                f"{q.model},{e.to} --escalation` measures it on a sample",
                "dim",
            )
        )


def _row(m: ModeQuote, *, chosen: bool) -> list[str]:
    warm = "1 pre-warm" if m.mode == "batch" else "1 warm-up"
    extra = ([warm] if m.warm_up else []) + ([f"{m.probe_calls:,} probe"] if m.probe_calls else [])
    if m.cache_plan == "lead":
        extra.append("1 ahead")
    calls = f"{m.calls:,}" + (f" ({', '.join(extra)})" if extra else "")
    return [
        m.mode + (" *" if chosen else ""),
        calls,
        f"{m.input_tokens:,}",
        f"{m.cache_write_tokens:,}",
        f"{m.cache_read_tokens:,}",
        f"{m.output_tokens:,}",
        usd(m.cost_usd),
        usd(m.min_cost_usd or m.cost_usd),
        usd(m.max_cost_usd),
    ]


def usd(value: float) -> str:
    """Dollars: four decimals below $10, cents above."""
    return f"${value:.4f}" if value < 10 else f"${value:,.2f}"
