"""How often a run on the simulator's faults has a block fail honestly (docs/testing.md).

A test that runs on ``faults.truncate`` and ``faults.skip_block`` and then asserts that every
block is done makes a bet: a block left alone (a pack of one) is charged an attempt each
time its answer is cut off or skips it (``apply_answer``, blockbatch/store/overlays.py), and
fails after ``max_block_attempts`` of them. This script plays the pack policy
(blockbatch/core/policy.py) against those two faults many times and prints how often at
least one block of the run fails, so a test can pick attempts that make that rare.

The model: each request is cut off with probability ``truncate`` (the simulator's partial
mode answers about the first half of the pack's blocks, blockbatch/simulator/engine.py
``_truncate_input``) and skips each block with probability ``skip``; a pack of several with
blocks left is halved (no attempt charged), a pack of one is tried again (one charged).
The simulator's dice roll on each request's bytes and how often it was sent, so a run
whose requests are the same every time (one pack in flight, nothing learned) gets the same
faults every time: the figure is the odds for a run whose requests vary (packs in flight
at once, ``max_tokens`` learned from answers), which is what makes a test flaky.

    .venv/bin/python bench/fault_odds.py --blocks 90 --pack-size 4 --truncate 0.15 \\
        --skip 0.03 --attempts 3 6
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS_DIR, Recorder


def failed_blocks(
    blocks: int, pack_size: int, truncate: float, skip: float, attempts: int, rng: random.Random
) -> int:
    """How many of ``blocks`` fail in one played run (packs of ``pack_size``)."""
    charged = [0] * blocks
    failed = 0
    for first in range(0, blocks, pack_size):
        todo = [list(range(first, min(first + pack_size, blocks)))]
        while todo:
            pack = todo.pop()
            answered = pack[: len(pack) // 2] if rng.random() < truncate else pack
            left = [b for b in pack if b not in answered or rng.random() < skip]
            if not left:
                continue
            if len(pack) > 1:
                half = len(left) // 2
                todo += [left[:half], left[half:]] if len(left) > 1 else [left]
                continue
            charged[pack[0]] += 1
            if charged[pack[0]] >= attempts:
                failed += 1
            else:
                todo.append(pack)
    return failed


def odds(
    blocks: int,
    pack_size: int,
    truncate: float,
    skip: float,
    attempts: int,
    trials: int,
    seed: int = 1,
) -> float:
    """The share of ``trials`` played runs in which at least one block failed."""
    rng = random.Random(seed)
    hits = sum(
        failed_blocks(blocks, pack_size, truncate, skip, attempts, rng) > 0 for _ in range(trials)
    )
    return hits / trials


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, required=True, help="blocks sent in the run(s)")
    parser.add_argument("--pack-size", type=int, required=True)
    parser.add_argument("--truncate", type=float, default=0.0, help="faults.truncate")
    parser.add_argument("--skip", type=float, default=0.0, help="faults.skip_block")
    parser.add_argument("--attempts", type=int, nargs="+", default=[3], help="max_block_attempts")
    parser.add_argument("--trials", type=int, default=20_000, help="runs played")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "fault_odds.json")
    return parser.parse_args(argv)


def main(args: argparse.Namespace) -> int:
    rec = Recorder("fault_odds", args)
    rows = [
        (a, odds(args.blocks, args.pack_size, args.truncate, args.skip, a, args.trials))
        for a in args.attempts
    ]
    rec.data["rows"] = [{"attempts": a, "p_some_block_fails": p} for a, p in rows]
    rec.print_table(
        f"{args.blocks} blocks in packs of {args.pack_size}, truncate {args.truncate}, "
        f"skip {args.skip} ({args.trials} runs played)",
        ["max_block_attempts", "runs with a failed block"],
        [(a, f"{p:.5f}") for a, p in rows],
    )
    rec.write()
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
