"""bench/fault_odds.py: the pack policy played against the simulator's faults."""

from __future__ import annotations

import random

from bench.fault_odds import failed_blocks, odds


def test_without_faults_no_block_fails() -> None:
    assert failed_blocks(40, 4, 0.0, 0.0, 1, random.Random(0)) == 0
    assert odds(40, 4, 0.0, 0.0, 1, trials=50) == 0.0


def test_a_lone_block_always_cut_off_fails_after_its_attempts() -> None:
    # Every answer cut off: a pack of four answers two, the halves are packs of one that are
    # never answered, so the two left in each pack fail.
    assert failed_blocks(8, 4, 1.0, 0.0, 3, random.Random(0)) == 4
    assert failed_blocks(5, 1, 1.0, 0.0, 3, random.Random(0)) == 5


def test_a_skipped_block_in_a_pack_is_halved_not_charged() -> None:
    # Every block skipped once would fail a pack of one at one attempt; in packs the skips
    # only split, so the block fails only once alone.
    assert failed_blocks(4, 4, 0.0, 1.0, 1, random.Random(0)) == 4
    assert failed_blocks(4, 4, 0.0, 1.0, 50, random.Random(0)) == 4  # skipped every time


def test_more_attempts_make_a_failed_block_rarer() -> None:
    few = odds(90, 4, 0.15, 0.03, 3, trials=2_000)
    many = odds(90, 4, 0.15, 0.03, 6, trials=2_000)
    assert few > 0.01 and many < few / 10
