"""Many short questions through ``llm_batch``: packed against one call per question.

``--questions`` short questions (default 500: arithmetic, "name a colour / fruit / animal"
in one of five languages, "summarise" with a one-sentence context on every fourth), all
distinct, asked with ``allm_batch(questions, contexts)`` (no schema: plain-text answers)
twice on one stack:

* **packed**: the default options (the planner packs up to the hard cap of 50 questions
  per call; the first call is a learning pack);
* **one per call**: ``pack_size=1``, the same code path with one question per call.

Both with ``max_parallel`` ``--max-parallel`` (default 8), answer reuse off (the second
mode would otherwise reuse every answer of the first), the simulator at realistic latency
(500 ms to the first token, 12 ms per output token; rate limits far above what the runs
use) and one ``worker.py`` subprocess; a cold prompt cache before each mode. Figures: the
ledger's calls, tokens by kind and cost; the wall time of the ``allm_batch`` call (ingest to
results); the items' usage shares against the run's cost; and parity: how many answers
differ between the two modes (the simulator answers each question from itself alone, so any
difference would mean answers were mixed).

    flock /tmp/blockbatch-bench.lock .venv/bin/python bench/questions.py
    .venv/bin/python bench/questions.py --questions 60 --out /tmp/q.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    BenchStack,
    Recorder,
    common_args,
    ledger_figures,
    new_pool,
    run_main,
)
from blockbatch.api import BatchResult, allm_batch
from blockbatch.runtime.process import exit_process

_LANGUAGES = ("English", "French", "German", "Spanish", "Italian")
_KINDS = ("colour", "fruit", "animal")
_TOPICS = (
    "the harbour",
    "the late harvest",
    "the new bridge",
    "the night train",
    "the village school",
    "the storm",
    "the market",
    "the old mill",
)


def questions(count: int) -> tuple[list[str], list[str | None]]:
    """``count`` distinct short questions and their contexts (every fourth has one)."""
    prompts: list[str] = []
    contexts: list[str | None] = []
    for n in range(count):
        kind = n % 4
        if kind == 0:
            prompts.append(f"What is {n} + {n % 13 + 1}?")
            contexts.append(None)
        elif kind == 1:
            prompts.append(f"Answer in {_LANGUAGES[n % 5]}: name a {_KINDS[n % 3]}. (question {n})")
            contexts.append(None)
        elif kind == 2:
            prompts.append(f"In one sentence, what is question {n} about?")
            contexts.append(None)
        else:
            topic = _TOPICS[n % len(_TOPICS)]
            prompts.append(f"Summarise the note in {_LANGUAGES[n % 5]}.")
            contexts.append(f"Note {n}: {topic} was discussed at length on day {n % 28 + 1}.")
    return prompts, contexts


async def one_mode(
    bs: BenchStack,
    pool: Any,
    name: str,
    prompts: list[str],
    contexts: list[str | None],
    **options: Any,
) -> tuple[dict[str, Any], BatchResult]:
    bs.sim_reset()  # a cold prompt cache and full buckets
    started = time.monotonic()
    out = await allm_batch(prompts, contexts, bb=bs.bb, reuse_answers=False, **options)
    wall = time.monotonic() - started
    ledger = await ledger_figures(pool, out.run_id)
    shares = sum(r.usage.cost_usd for r in out)
    figures = {
        "mode": name,
        "run_id": out.run_id,
        "status": out.run.status,
        "options": options,
        "wall_s": round(wall, 2),
        "answered": len(out.successes),
        "errors": out.error_count,
        "calls": out.run.calls,
        "pack_count": out.run.pack_count,
        "split_events": out.run.split_events,
        "input_tokens": out.run.input_tokens,
        "output_tokens": out.run.output_tokens,
        "cache_write_tokens": out.run.cache_creation_input_tokens,
        "cache_read_tokens": out.run.cache_read_input_tokens,
        "cost_usd": round(out.run.cost_usd, 6),
        "item_usage_cost_sum_usd": round(shares, 6),
        "cost_per_question_usd": round(out.run.cost_usd / len(prompts), 8),
        "largest_pack": ledger["largest_pack"],
        "ledger": ledger,
    }
    print(
        f"{name}: {figures['status']}, {figures['calls']} calls, "
        f"${figures['cost_usd']:.4f}, {figures['wall_s']} s",
        flush=True,
    )
    return figures, out


async def main(args: argparse.Namespace) -> int:
    rec = Recorder("questions", args)
    scenario = {
        "speed_factor": 1.0,
        "latency": {"ttft_ms": args.ttft_ms, "per_output_token_ms": args.per_token_ms},
        "limits": {"rpm": 100_000, "input_tpm": 100_000_000, "output_tpm": 100_000_000},
    }
    prompts, contexts = questions(args.questions)
    async with BenchStack(
        "questions",
        fsync=args.fsync,
        temporal_file=args.temporal_file,
        scenario=scenario,
        keep=args.keep,
    ) as bs:
        rec.data["stack"] = bs.describe()
        rec.data["stack"]["workers"] = "1 worker.py subprocess, defaults"
        rec.data["scenario"] = scenario
        pool = await new_pool(bs, 5)
        try:
            await bs.start_workers(1)
            packed, packed_out = await one_mode(
                bs, pool, "packed", prompts, contexts, max_parallel=args.max_parallel
            )
            single, single_out = await one_mode(
                bs,
                pool,
                "one per call",
                prompts,
                contexts,
                max_parallel=args.max_parallel,
                pack_size=1,
            )
        finally:
            await pool.close()
    differing = sum(1 for a, b in zip(packed_out.values, single_out.values, strict=True) if a != b)
    rec.data["modes"] = [packed, single]
    rec.data["parity"] = {"questions": args.questions, "answers_differing": differing}
    rec.data["packed_vs_single"] = {
        "calls": f"{packed['calls']} vs {single['calls']}",
        "cost_share": round(packed["cost_usd"] / single["cost_usd"], 4),
        "wall_share": round(packed["wall_s"] / single["wall_s"], 4),
    }
    rows = [
        [
            m["mode"],
            m["calls"],
            m["largest_pack"],
            m["answered"],
            m["errors"],
            m["input_tokens"],
            m["output_tokens"],
            f"{m['cost_usd']:.4f}",
            f"{m['cost_per_question_usd'] * 1000:.4f}",
            f"{m['wall_s']:.1f}",
        ]
        for m in (packed, single)
    ]
    rec.print_table(
        f"{args.questions} short questions, llm_batch without a schema, max_parallel "
        f"{args.max_parallel}; latency {args.ttft_ms} ms + {args.per_token_ms} ms/token",
        [
            "mode",
            "calls",
            "largest call",
            "answered",
            "errors",
            "input tokens",
            "output tokens",
            "cost $",
            "$ per 1000 questions",
            "wall s",
        ],
        rows,
        [
            (
                f"packed / one per call: cost {rec.data['packed_vs_single']['cost_share']:.1%}, "
                f"wall time {rec.data['packed_vs_single']['wall_share']:.1%}; answers differing "
                f"between the modes: {differing} of {args.questions}. Wall time: the allm_batch "
                "call, ingest to results."
            )
        ],
    )
    rec.write()
    return 0 if differing == 0 and packed["errors"] == single["errors"] == 0 else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--max-parallel", type=int, default=8)
    parser.add_argument("--ttft-ms", type=float, default=500)
    parser.add_argument("--per-token-ms", type=float, default=12)
    common_args(parser, "questions")
    return parser.parse_args(argv)


if __name__ == "__main__":
    exit_process(run_main(main, parse_args()))
