"""Ingest measured on the real-document corpus (bench/corpus/README.md).

For every document of every manifest that is in the cache (``bench/corpus_fetch.py``
fills it), ``parse_document`` is timed and its blocks are measured:

* **recall**: share of an independent extractor's words (a multiset, lower case) found in
  the blocks: ``pdftotext`` (poppler-utils) for PDF, ``pandoc`` for DOCX (its note
  references "[1]" left out: its numbering, not the text) and HTML, for
  PPTX every paragraph of the slides' own XML read with the standard library (not
  python-pptx, which ingest uses; speaker notes left out, as ingest leaves them by
  default); none for XLSX. When the tool is missing the column says so.
* **vs MuPDF** (PDF): ours and pdftotext's recall of a third engine's words (``mutool draw
  -F txt``: neither poppler nor PDFium), both counted by ``fair_words`` (NFKC, cut at white
  space, punctuation and symbols off each token's ends, case folded); once more with list
  items' markers, which ingest keeps in ``metadata["marker"]``, counted as ours.
* **mid-sentence**: paragraph blocks that end without a sentence's end while the next
  paragraph starts in lower case (a paragraph cut in two), over the paragraph blocks.
* **set aside**: share of blocks typed as boilerplate (``SET_ASIDE_TYPES``).
* **wide**: on multi-column pages (two paragraph blocks side by side, each narrower than
  half the page), share of the page's blocks wider than 60% of it.
* **stray**: U+FFFE, U+FFFF and C0/C1 control characters in the blocks.
* **off page**: blocks whose box leaves its page.
* **tables**: blocks typed ``table`` (a PDF's tables are found by their aligned columns).
* **pages/s**: pages (slides, sheets) over the parse time.

Each row also keeps ``missing_words``: the reference's words most often missing from the
blocks, so a recall below 1 can be read (a rotated word that pdftotext prints in pieces
counts as its pieces).

Writes bench/results/corpus.json and prints a markdown table.

    .venv/bin/python bench/corpus.py
    .venv/bin/python bench/corpus.py --kind pdf --only federal
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import unicodedata
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus_fetch import DEFAULT_CACHE, documents
from blockbatch.core.blocks import BBox, IngestError, ParsedBlock, is_set_aside
from blockbatch.core.ingest import parse_document

RESULTS = Path(__file__).resolve().parent / "results" / "corpus.json"
_WORD = re.compile(r"\w+")
_STRAY = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffe\uffff]")
_ENDS = re.compile(r"[.!?:;\u2026][\"'\u201d\u2019)\]]*$")
REFERENCE = {"pdf": "pdftotext", "docx": "pandoc", "html": "pandoc"}
_NOTE_REF = re.compile(r"\[\d+\]")
_SLIDE = re.compile(r"^ppt/slides/slide\d+\.xml$")
_A_TEXT = "{http://schemas.openxmlformats.org/drawingml/2006/main}t"
_A_PARA = "{http://schemas.openxmlformats.org/drawingml/2006/main}p"
_A_BREAK = "{http://schemas.openxmlformats.org/drawingml/2006/main}br"


def slide_xml_text(path: Path) -> str:
    """Every paragraph (``<a:p>``: its ``<a:t>`` runs joined, an ``<a:br/>`` a new line)
    of a PPTX's slides: the file's own XML, read without python-pptx."""
    with zipfile.ZipFile(path) as z:
        roots = [ElementTree.fromstring(z.read(n)) for n in z.namelist() if _SLIDE.match(n)]
    return "\n".join(
        "".join(
            (el.text or "") if el.tag == _A_TEXT else "\n"
            for el in para.iter()
            if el.tag in (_A_TEXT, _A_BREAK)
        )
        for root in roots
        for para in root.iter(_A_PARA)
    )


def reference_text(kind: str, path: Path) -> tuple[str | None, str]:
    """The independent extractor's text, or None and why not."""
    if kind == "pptx":
        return slide_xml_text(path), "slide XML"
    tool = REFERENCE.get(kind)
    if tool is None:
        return None, f"no independent extractor for {kind}"
    if shutil.which(tool) is None:
        package = "poppler-utils" if tool == "pdftotext" else "pandoc"
        return None, f"{tool} is not installed (apt-get install {package})"
    if tool == "pdftotext":
        cmd = ["pdftotext", "-enc", "UTF-8", str(path), "-"]
    else:
        cmd = ["pandoc", "-f", kind, "-t", "plain", "--wrap=none", str(path)]
    done = subprocess.run(cmd, capture_output=True, check=False, timeout=300)
    if done.returncode != 0:
        return None, f"{tool} failed: {done.stderr.decode(errors='replace').strip()[:120]}"
    text = done.stdout.decode("utf-8", errors="replace")
    if kind == "docx":  # pandoc's note references ("[1]"): its numbering, not the text
        text = _NOTE_REF.sub(" ", text)
    return text, tool


def words(text: str) -> Counter[str]:
    """The first measure's words (kept so its figures compare with earlier runs): runs of
    word characters, lower case."""
    return Counter(w.lower() for w in _WORD.findall(text))


def _strip_ends(token: str) -> str:
    start, end = 0, len(token)
    while start < end and unicodedata.category(token[start])[0] in "PS":
        start += 1
    while end > start and unicodedata.category(token[end - 1])[0] in "PS":
        end -= 1
    return token[start:end]


def fair_words(text: str) -> Counter[str]:
    """The three-way measure's words, the same for every extractor: the text in Unicode
    NFKC (a ligature "ﬁ" is "fi", a full-width digit a digit), cut at white space, each
    token's punctuation and symbols at both ends taken off ("(2020)," is "2020", "don't"
    stays whole), case folded; tokens left empty are dropped."""
    out: Counter[str] = Counter()
    for token in unicodedata.normalize("NFKC", text).split():
        word = _strip_ends(token).casefold()
        if word:
            out[word] += 1
    return out


def fair_recall(ours: str, reference: str) -> float | None:
    """Share of the reference's ``fair_words`` (a multiset) found in ours."""
    ref = fair_words(reference)
    total = sum(ref.values())
    if not total:
        return None
    return sum((fair_words(ours) & ref).values()) / total


def fair_missing(ours: str, reference: str, n: int = 8) -> list[list[Any]]:
    return [[w, c] for w, c in (fair_words(reference) - fair_words(ours)).most_common(n)]


def markers(blocks: list[ParsedBlock]) -> str:
    """The list items' markers, which ingest keeps in ``metadata["marker"]``."""
    return "\n".join(str(b.metadata.get("marker", "")) for b in blocks if b.metadata)


def third_text(path: Path) -> tuple[str | None, str]:
    """MuPDF's text of a PDF (``mutool draw -F txt``): a third PDF engine, neither
    poppler (pdftotext) nor PDFium (ours), so it can judge the two."""
    if shutil.which("mutool") is None:
        return None, "mutool is not installed (apt-get install mupdf-tools)"
    cmd = ["mutool", "draw", "-q", "-F", "txt", "-o", "-", str(path)]
    done = subprocess.run(cmd, capture_output=True, check=False, timeout=300)
    if done.returncode != 0:
        return None, f"mutool failed: {done.stderr.decode(errors='replace').strip()[:120]}"
    return done.stdout.decode("utf-8", errors="replace"), "mutool"


def missing_words(ours: str, reference: str, n: int = 8) -> list[list[Any]]:
    """The reference's words most often missing from ours, with how many times: what a
    recall below 1 is made of (a word cut in pieces by the reference counts too)."""
    return [[w, c] for w, c in (words(reference) - words(ours)).most_common(n)]


def recall(ours: str, reference: str) -> float | None:
    ref = words(reference)
    total = sum(ref.values())
    if not total:
        return None
    return sum((words(ours) & ref).values()) / total


def mid_sentence(blocks: list[ParsedBlock]) -> tuple[int, int]:
    """(paragraphs cut in two, paragraph blocks), over the blocks that are sent."""
    sent = [b for b in blocks if not is_set_aside(b.block_type)]
    paragraphs = [b for b in sent if b.block_type == "paragraph"]
    cut = 0
    for block, nxt in itertools.pairwise(sent):
        if block.block_type != "paragraph" or nxt.block_type != "paragraph":
            continue
        text = block.block_content.rstrip()
        first = nxt.block_content.lstrip()[:1]
        if text and not _ENDS.search(text) and first.islower():
            cut += 1
    return cut, len(paragraphs)


def wide_blocks(blocks: list[ParsedBlock]) -> tuple[int, int, int]:
    """(blocks wider than 60% of a multi-column page, blocks on such pages, such pages)."""
    by_page: dict[int, list[tuple[str, BBox]]] = {}
    widths: dict[int, float] = {}
    for b in blocks:
        p = b.provenance
        if p and p.page and p.bbox and p.page_size and not is_set_aside(b.block_type):
            by_page.setdefault(p.page, []).append((b.block_type, p.bbox))
            widths[p.page] = p.page_size[0]
    wide = total = pages = 0
    for page, boxes in by_page.items():
        width = widths[page]
        narrow = [x for kind, x in boxes if kind == "paragraph" and x[2] - x[0] < 0.5 * width]
        side_by_side = any(
            a[2] <= c[0] and a[1] < c[3] and c[1] < a[3] for a in narrow for c in narrow
        )
        if not side_by_side:
            continue
        pages += 1
        total += len(boxes)
        wide += sum(1 for _, x in boxes if x[2] - x[0] > 0.6 * width)
    return wide, total, pages


def off_page(blocks: list[ParsedBlock]) -> int:
    n = 0
    for b in blocks:
        p = b.provenance
        if p and p.bbox and p.page_size:
            x0, y0, x1, y1 = p.bbox
            w, h = p.page_size
            if x0 < -0.5 or y0 < -0.5 or x1 > w + 0.5 or y1 > h + 0.5:
                n += 1
    return n


def page_count(kind: str, data: bytes, blocks: list[ParsedBlock]) -> int:
    if kind == "pdf":
        import pypdfium2 as pdfium

        doc = pdfium.PdfDocument(data)
        try:
            return len(doc)
        finally:
            doc.close()
    return max([b.provenance.page or 1 for b in blocks if b.provenance] or [1])


def measure(doc: dict[str, Any], cache: Path) -> dict[str, Any]:
    path = cache / doc["file"]
    kind = doc["kind"]
    data = path.read_bytes()
    row: dict[str, Any] = {"file": doc["file"], "kind": kind, "exercises": doc["exercises"]}
    t0 = time.perf_counter()
    try:
        blocks = parse_document(data, kind)
    except IngestError as exc:
        row["refused"] = str(exc)
        return row
    parse_s = time.perf_counter() - t0
    pages = page_count(kind, data, blocks)
    ours = "\n".join(b.block_content for b in blocks)
    reference, tool = reference_text(kind, path)
    third, third_tool = third_text(path) if kind == "pdf" else (None, "")
    cut, paragraphs = mid_sentence(blocks)
    wide, on_multi, multi_pages = wide_blocks(blocks)
    types = Counter(b.block_type for b in blocks)
    set_aside = sum(n for t, n in types.items() if is_set_aside(t))
    row.update(
        {
            "pages": pages,
            "blocks": len(blocks),
            "types": dict(types),
            "recall": None if reference is None else recall(ours, reference),
            "missing_words": [] if reference is None else missing_words(ours, reference),
            "reference": tool,
            "third": third_tool,
            "ours_vs_third": None if third is None else fair_recall(ours, third),
            "pdftotext_vs_third": (
                None if third is None or reference is None else fair_recall(reference, third)
            ),
            # a list item's marker ("1.", "•") is kept in metadata["marker"], not its text
            "ours_with_markers_vs_third": (
                None if third is None else fair_recall(ours + "\n" + markers(blocks), third)
            ),
            "ours_missing_vs_third": [] if third is None else fair_missing(ours, third),
            "pdftotext_missing_vs_third": (
                [] if third is None or reference is None else fair_missing(reference, third)
            ),
            "mid_sentence": cut,
            "paragraphs": paragraphs,
            "set_aside": set_aside,
            "running_headers": sum(
                types.get(t, 0) for t in ("page_header", "page_footer", "page_number")
            ),
            "headings": types.get("heading", 0),
            "tables": types.get("table", 0),
            "wide": wide,
            "blocks_on_multicolumn_pages": on_multi,
            "multicolumn_pages": multi_pages,
            "stray": len(_STRAY.findall(ours)),
            "off_page": off_page(blocks),
            "parse_s": round(parse_s, 4),
            "pages_per_s": round(pages / parse_s, 1) if parse_s else None,
        }
    )
    return row


def pct(n: float | None) -> str:
    return "" if n is None else f"{100 * n:.0f}%"


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| file | pages | blocks | recall | vs mutool: ours, pdftotext | mid-sentence | set aside | headers | headings "
        "| tables | wide (multi-col) | stray | off page | pages/s |"
    )
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['file']} | refused: {r['refused'][:90]}… |" + " |" * 12)
            continue
        recall_s = pct(r["recall"]) if r["recall"] is not None else r["reference"]
        wide_s = (
            f"{r['wide']}/{r['blocks_on_multicolumn_pages']} ({r['multicolumn_pages']} p)"
            if r["multicolumn_pages"]
            else ""
        )
        third_s = (
            f"{pct(r['ours_vs_third'])}, {pct(r['pdftotext_vs_third'])}"
            if r.get("ours_vs_third") is not None
            else ""
        )
        lines.append(
            f"| {r['file']} | {r['pages']} | {r['blocks']} | {recall_s} | {third_s} "
            f"| {r['mid_sentence']}/{r['paragraphs']} | {pct(r['set_aside'] / r['blocks'])} "
            f"| {r['running_headers']} | {r['headings']} | {r['tables']} | {wide_s} | {r['stray']} "
            f"| {r['off_page']} | {r['pages_per_s']} |"
        )
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if "refused" not in r]
    multi = [r for r in ok if {"two_columns", "three_columns"} & set(r["exercises"])]
    three = [r for r in ok if "three_columns" in r["exercises"]]
    pages = sum(r["pages"] for r in ok)
    seconds = sum(r["parse_s"] for r in ok)
    return {
        "documents": len(rows),
        "refused": [r["file"] for r in rows if "refused" in r],
        "min_recall": min((r["recall"] for r in ok if r["recall"] is not None), default=None),
        "below_pdftotext_vs_third": [
            r["file"]
            for r in ok
            if r.get("ours_vs_third") is not None
            and r.get("pdftotext_vs_third") is not None
            and r["ours_vs_third"] < r["pdftotext_vs_third"]
        ],
        "mid_sentence_multicolumn": [
            sum(r["mid_sentence"] for r in multi),
            sum(r["paragraphs"] for r in multi),
        ],
        "wide_three_columns": [
            sum(r["wide"] for r in three),
            sum(r["blocks_on_multicolumn_pages"] for r in three),
        ],
        "stray": sum(r["stray"] for r in ok),
        "off_page": sum(r["off_page"] for r in ok),
        "running_headers_missing": [
            r["file"]
            for r in ok
            if "running_headers" in r["exercises"] and not r["running_headers"]
        ],
        "tables_on_table_files": {
            r["file"]: r["tables"] for r in ok if "tables" in r["exercises"] and r["kind"] == "pdf"
        },
        "pages": pages,
        "pages_per_s": round(pages / seconds, 1) if seconds else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--kind", help="only documents of this kind (pdf, docx, ...)")
    parser.add_argument("--only", help="only files whose name contains this")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    missing = []
    for doc in documents():
        if args.kind and doc["kind"] != args.kind:
            continue
        if args.only and args.only not in doc["file"]:
            continue
        if not (args.cache / doc["file"]).is_file():
            missing.append(doc["file"])
            continue
        rows.append(measure(doc, args.cache))
    for tool in sorted(set(REFERENCE.values())):
        if shutil.which(tool) is None:
            print(f"note: {tool} is not installed: no word recall for its formats")
    if missing:
        print(f"note: {len(missing)} documents are not in {args.cache} "
              "(run bench/corpus_fetch.py): " + ", ".join(missing))  # fmt: skip
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "summary": summary(rows),
        "documents": rows,
        "missing": missing,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(table(rows))
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
