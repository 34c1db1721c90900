"""bench/scale.py's document and its ingest measurement."""

from __future__ import annotations

import os
import sys

import pytest

from bench.common import proc_status
from bench.scale import distinct_document, reset_peak_rss
from blockbatch.core.ingest import parse_document


@pytest.mark.parametrize("n", [1, 12, 13, 250])
def test_the_distinct_document_has_exactly_n_blocks_no_two_alike(n: int) -> None:
    blocks = parse_document(distinct_document(n), "markdown")
    assert len(blocks) == n
    assert len({b.block_content for b in blocks}) == n
    assert blocks[0].block_type == "heading"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_the_peak_rss_is_reset_to_what_is_held_now() -> None:
    held = bytearray(64 * 2**20)  # touched: 64 MiB resident
    held[::4096] = b"x" * len(held[::4096])
    del held
    before = proc_status(os.getpid())["VmHWM"]
    assert reset_peak_rss()
    after = proc_status(os.getpid())["VmHWM"]
    assert after < before - 32 * 2**20
