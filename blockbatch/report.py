"""Human-readable run summaries, shared by the starter and the demo."""

from __future__ import annotations

import asyncpg

from blockbatch.models import RunResult
from blockbatch.registry import Usage, cost_usd, get_model


async def baseline_cost(pool: asyncpg.Pool, run_id: str) -> float | None:
    """Estimated cost of the same run at one call per block without prompt caching.

    Every block would pay the full prompt prefix as plain input and its own output; we
    take the prefix size and the per-block output from what this run actually used.
    """
    row = await pool.fetchrow(
        """select r.model, r.blocks_total,
                  sum(c.input_tokens + c.cache_creation_input_tokens
                      + c.cache_read_input_tokens) as prompt_tokens,
                  sum(c.output_tokens) as output_tokens,
                  sum(cardinality(c.block_uids)) as blocks_sent,
                  count(*) as calls
           from runs r join llm_calls c using (run_id)
           where r.run_id = $1 and c.status = 'succeeded'
           group by r.model, r.blocks_total""",
        run_id,
    )
    if row is None or not row["calls"]:
        return None
    prefix = await pool.fetchval(
        """select min(cache_creation_input_tokens + cache_read_input_tokens)
           from llm_calls where run_id = $1 and status = 'succeeded'""",
        run_id,
    ) or 0
    per_block_content = (row["prompt_tokens"] - prefix * row["calls"]) / max(row["blocks_sent"], 1)
    per_block_output = row["output_tokens"] / max(row["blocks_sent"], 1)
    n = row["blocks_total"]
    usage = Usage(
        input_tokens=int(n * (prefix + per_block_content)),
        output_tokens=int(n * per_block_output),
    )
    return cost_usd(get_model(row["model"]), usage)


def summary_lines(result: RunResult, *, baseline: float | None, ui_url: str,
                  duration_s: float | None = None) -> list[str]:
    prompt = (result.input_tokens + result.cache_creation_input_tokens
              + result.cache_read_input_tokens)
    hit = result.cache_read_input_tokens / prompt if prompt else 0.0
    lines = [
        f"run {result.run_id}: {result.status}" + (f" ({result.error})" if result.error else ""),
        f"  blocks      {result.blocks_ai_complete} ok · {result.blocks_failed} failed · "
        f"{result.blocks_cancelled} cancelled · {result.blocks_total} total",
        f"  calls       {result.calls} calls for {result.blocks_total} blocks "
        f"({result.pack_count} packs, {result.split_events} split events)",
        f"  tokens      in {result.input_tokens:,} · out {result.output_tokens:,} · "
        f"cache write {result.cache_creation_input_tokens:,} · "
        f"cache read {result.cache_read_input_tokens:,} (cache hit ratio {hit:.0%})",
        f"  cost        ${result.cost_usd:.4f}"
        + (f" vs ${baseline:.4f} at one call per block without caching "
           f"({1 - result.cost_usd / baseline:.0%} saved)" if baseline else ""),
    ]
    if duration_s is not None:
        lines.append(f"  duration    {duration_s:.1f}s")
    lines.append(f"  Temporal UI {ui_url}")
    return lines
