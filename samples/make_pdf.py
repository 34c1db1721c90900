"""Write samples/handbook.pdf: the sample handbook (handbook.md) typeset as a PDF.

The demo runs it with `python -m blockbatch.devtools.demo --document samples/handbook.pdf`.
Regenerate after editing handbook.md: `python samples/make_pdf.py` (needs the dev extra's
fpdf2). The output is deterministic, so a regenerated file differs only if the text did.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's blockbatch, as bench/ scripts do

from blockbatch.core.ingest import parse_document
from blockbatch.devtools.pdfgen import blocks_pdf


def main() -> int:
    blocks = parse_document((HERE / "handbook.md").read_bytes(), "markdown")
    target = HERE / "handbook.pdf"
    target.write_bytes(blocks_pdf(blocks))
    print(f"wrote {target} ({target.stat().st_size} bytes, from {len(blocks)} blocks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
