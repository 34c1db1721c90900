"""HTML main content: precision and recall of the blocks a run sends, per page.

For every HTML entry of ``bench/corpus/formats.json`` with a ``main_content`` (a hand-checked
XPath of the page's article), the reference is that element's words; what blockbatch sends
is the words of the page's blocks that are not set aside (``navigation``). Precision: the
share of sent words that are main content; recall: the share of main content sent (words
counted as a multiset, punctuation at their edges stripped). ``--html-all`` measures the
whole page instead, as ``--html-all`` ingests it. The files come from the corpus cache
(``/work/corpus`` or ``BLOCKBATCH_CORPUS``, see bench/corpus/README.md).

    .venv/bin/python bench/html_main_content.py [--html-all] [--out FILE]

The bar (issue 34): precision at least 0.8 and recall at least 0.9 on every page.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from blockbatch.core.blocks import ConvertOptions, is_set_aside
from blockbatch.core.ingest import parse_document

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "bench" / "corpus" / "formats.json"
_EDGES = ".,;:!?()[]{}\"'“”‘’«»"


def words(text: str) -> Counter[str]:
    """The text's words as a multiset, lower case, punctuation at their edges stripped."""
    return Counter(w for w in (w.strip(_EDGES).lower() for w in text.split()) if w)


def reference(data: bytes, xpath: str) -> Counter[str]:
    """The words of the page's main content: the elements ``xpath`` selects."""
    from lxml import html

    root = html.document_fromstring(data)
    for element in list(root.iter("script", "style", "noscript", "template")):
        element.drop_tree()
    return words(" ".join(e.text_content() for e in root.xpath(xpath)))


def measure(data: bytes, xpath: str, *, html_all: bool) -> dict[str, float | int]:
    """Precision, recall, blocks sent and set aside, and seconds to ingest, of one page."""
    ref = reference(data, xpath)
    started = time.perf_counter()
    blocks = parse_document(data, "html", options=ConvertOptions(html_all=html_all))
    seconds = time.perf_counter() - started
    sent = [b for b in blocks if not is_set_aside(b.block_type)]
    got = words(" ".join(b.block_content for b in sent))
    shared = sum((got & ref).values())
    return {
        "precision": round(shared / max(1, sum(got.values())), 3),
        "recall": round(shared / max(1, sum(ref.values())), 3),
        "reference_words": sum(ref.values()),
        "sent_words": sum(got.values()),
        "blocks_sent": len(sent),
        "blocks_set_aside": len(blocks) - len(sent),
        "seconds": round(seconds, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html-all", action="store_true", help="measure the whole page")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    cache = Path(os.environ.get("BLOCKBATCH_CORPUS", "/work/corpus"))
    entries = [e for e in json.loads(MANIFEST.read_text())["documents"] if e.get("main_content")]
    results: dict[str, dict[str, float | int]] = {}
    print(f"{'page':<28} {'P':>5} {'R':>5} {'sent':>5} {'aside':>5} {'s':>6}")
    for entry in entries:
        path = cache / entry["file"]
        if not path.is_file():
            print(f"{entry['file']:<28} missing from {cache} (bench/corpus/README.md)")
            continue
        figures = measure(path.read_bytes(), entry["main_content"]["xpath"], html_all=args.html_all)
        results[entry["file"]] = figures
        print(
            f"{entry['file']:<28} {figures['precision']:>5.2f} {figures['recall']:>5.2f} "
            f"{figures['blocks_sent']:>5} {figures['blocks_set_aside']:>5} "
            f"{figures['seconds']:>6.2f}"
        )
    if results:
        n = len(results)
        p = sum(float(r["precision"]) for r in results.values()) / n
        r = sum(float(r["recall"]) for r in results.values()) / n
        print(f"{'mean of ' + str(n):<28} {p:>5.2f} {r:>5.2f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
