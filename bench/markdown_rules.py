"""The Markdown parser's two rule sets side by side (docs/testing.md, the session of
2026-11-29 17:10 UTC): the blocks they give and what they cost.

blockbatch parses with CommonMark's block rules and GFM tables only
(``blockbatch.core.markdown.BLOCK_RULES``); before, it ran the full CommonMark rule set,
whose inline ``backticks`` rule panics in markdown-it.rs 0.6 on a ``[`` with an unmatched
backtick after it. This script walks both over the CommonMark spec's examples, the Markdown
files under ``--glob`` (real documents: by default Debian's and the installed Python
packages' docs) and ``--random`` seeded texts over Markdown's punctuation, and counts the
texts whose blocks differ and those on which each rule set panics. Then it times both over
all the files joined into one document (``--repeat`` times), in CPU seconds.

    .venv/bin/python bench/markdown_rules.py
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from markdown_it_pyrs import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import blockbatch.core.markdown as markdown
from bench.common import RESULTS_DIR, Recorder

SPEC = ROOT / "tests" / "fixtures" / "commonmark" / "spec-0.31.2.json"
GLOBS = ("/usr/share/doc/**/*.md", str(ROOT / ".venv" / "lib" / "python3*" / "**" / "*.md"))
#: What the random texts are drawn from (here and in tests/unit/test_markdown_blocks_only.py):
#: Markdown's punctuation, whitespace and a few letters, so that they open and close
#: brackets, code spans, emphasis, lists, quotes and tables far more often than any text.
CHARS = "[]`*_#>-+|\\!()<>:.1 \t\n\naé\x1e"
PANIC = "PanicException"


def full_rules() -> MarkdownIt:
    """The rule set blockbatch parsed with before: CommonMark's, inline rules included."""
    return MarkdownIt("commonmark").enable("table")


def blocks(text: str, parser: Callable[[], MarkdownIt]) -> list[tuple[Any, ...]] | str:
    """The blocks of ``text`` under ``parser``, or :data:`PANIC` when the parser panics."""
    saved = markdown._parser
    markdown._parser = parser
    try:
        return [
            (b.block_type, b.content, json.dumps(b.metadata, sort_keys=True), b.provenance)
            for b in markdown.iter_markdown(text)
        ]
    except markdown.ParserCrash:  # the parser panicked (pyo3's PanicException)
        return PANIC
    finally:
        markdown._parser = saved


def compare(texts: Sequence[str]) -> dict[str, int]:
    """How many of ``texts`` each rule set panics on, and on how many of the others the two
    give different blocks."""
    counts = {"texts": len(texts), "full_panics": 0, "block_panics": 0, "differ": 0}
    for text in texts:
        full, ours = blocks(text, full_rules), blocks(text, markdown._parser)
        counts["full_panics"] += full == PANIC
        counts["block_panics"] += ours == PANIC
        if PANIC not in (full, ours) and full != ours:
            counts["differ"] += 1
    return counts


def cpu_seconds(text: str, parser: Callable[[], MarkdownIt]) -> tuple[float, int | str]:
    started = time.process_time()
    found = blocks(text, parser)
    return time.process_time() - started, (found if isinstance(found, str) else len(found))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--glob", nargs="+", default=list(GLOBS), help="Markdown files to use")
    parser.add_argument("--random", type=int, default=20_000, help="random texts (seeded)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=4, help="the joined files, this often")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "markdown_rules.json")
    return parser.parse_args(argv)


def main(args: argparse.Namespace) -> int:
    rec = Recorder("markdown_rules", args)
    paths = sorted({p for pattern in args.glob for p in glob.glob(pattern, recursive=True)})
    files = [Path(p).read_text(errors="replace").replace("\r\n", "\n") for p in paths]
    spec = [e["markdown"] for e in json.loads(SPEC.read_text())]
    rnd = random.Random(args.seed)
    drawn = [
        "".join(rnd.choice(CHARS) for _ in range(rnd.randint(1, 60))) for _ in range(args.random)
    ]
    sets = {"CommonMark spec examples": spec, "Markdown files": files, "random texts": drawn}
    counted = {name: compare(texts) for name, texts in sets.items()}
    rec.data["compared"] = counted
    rec.print_table(
        "The blocks of both rule sets",
        ["texts", "how many", "full rules panic", "block rules panic", "blocks differ"],
        [
            (name, c["texts"], c["full_panics"], c["block_panics"], c["differ"])
            for name, c in counted.items()
        ],
    )
    joined = "\n\n".join(files) * args.repeat
    timings = []
    for name, parser in (("full", full_rules), ("block", markdown._parser)) * 2:
        seconds, found = cpu_seconds(joined, parser)
        timings.append({"rules": name, "cpu_s": round(seconds, 2), "blocks": found})
    rec.data["timings"] = timings
    rec.data["joined_kib"] = len(joined.encode()) // 1024
    rec.print_table(
        f"Parsing the {len(files)} files joined, {args.repeat} times "
        f"({rec.data['joined_kib']:,} KiB), alternately",
        ["rules", "CPU s", "blocks"],
        [(t["rules"], t["cpu_s"], t["blocks"]) for t in timings],
    )
    rec.write()
    return 0 if all(c["block_panics"] == 0 for c in counted.values()) else 1


if __name__ == "__main__":
    sys.exit(main(parse_args()))
