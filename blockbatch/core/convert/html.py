"""HTML into blocks through lxml's HTML parser (libxml2: tolerant of real-world markup).

Headings, paragraphs, list items (without their nested lists, which are blocks of their
own one level deeper), ``pre`` (code, language from a ``language-*`` class), tables (one
block, rows as ``| a | b |``), blockquotes and definition terms each become a block; text
directly inside a container between such elements is a paragraph. Scripts, styles,
templates and the ``head`` are not content. Whitespace collapses as a browser shows it;
``<br>`` is a line break.

A table that holds another table is page layout, not data: its cells are read as
containers, so each nested table is one block of its own and no text is emitted twice.

**Main content.** A web page is mostly menus, links and footers around an article.
trafilatura (a maintained main-content extractor, measured against readability-lxml in the
README's dependency list) finds the article's text; every block whose words are mostly not
in it is typed ``navigation``, a set-aside type (:data:`blockbatch.core.blocks.SET_ASIDE_TYPES`):
kept and exported with its provenance, not sent to the model unless a run asks.
``metadata["content_type"]`` keeps what the block would be otherwise. With ``html_all``
every block keeps its type, as the page shows it.

A file of several concatenated HTML documents (a crawl saved to one file) is read as each
of them in turn; each block's ``metadata["document"]`` numbers its document from 1.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from blockbatch.core.blocks import ConvertOptions, IngestError, RawBlock, TextBuilder
from blockbatch.core.convert.limits import check_size
from blockbatch.core.convert.tables import clean_rows, table_text

_SKIP = ("script", "style", "noscript", "template", "head", "svg", "math", "iframe", "object")
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_LEAVES = {"p": "paragraph", "dt": "paragraph", "dd": "paragraph", "figcaption": "paragraph"}
_BLOCK_TAGS = {
    *_HEADINGS,
    *_LEAVES,
    "address", "article", "aside", "blockquote", "body", "details", "dialog", "div", "dl",
    "fieldset", "figure", "footer", "form", "header", "hgroup", "hr", "li", "main", "nav",
    "ol", "pre", "section", "summary", "table", "ul", "html",
}  # fmt: skip
#: Where a ``<br>`` was: a character no page writes (U+2028 is whitespace to ``split``).
_BREAK = "\ue000"
#: Elements nested deeper than this are read as text of the element at this depth.
MAX_DEPTH = 200


#: Where a further document starts in a file of concatenated ones: a doctype or an
#: ``<html>`` tag after an ``</html>``.
_NEXT_DOCUMENT = re.compile(rb"</html\s*>\s*(?=<!doctype\s|<html[\s>])", re.IGNORECASE)
#: A block is main content when at least this share of its words runs as in the
#: extractor's text; a block shorter than ``SHORT_BLOCK_WORDS`` words must run whole.
MAIN_SHARE = 0.5
SHORT_BLOCK_WORDS = 4
_WORD_EDGES = ".,;:!?()[]{}\"'“”‘’«»"


def split_documents(data: bytes) -> list[bytes]:
    """The HTML documents a file holds, in order: one, or each of several concatenated."""
    parts, start = [], 0
    for match in _NEXT_DOCUMENT.finditer(data):
        parts.append(data[start : match.end()])
        start = match.end()
    parts.append(data[start:])
    return [p for p in parts if p.strip()] or [data]


def convert_html(data: bytes, options: ConvertOptions | None = None) -> list[RawBlock]:
    """The blocks of the file's HTML documents in order, navigation typed as such.

    Raises:
        IngestError: a page too large, or one lxml cannot read at all.
    """
    check_size(data, "HTML page")
    options = options or ConvertOptions()
    documents = split_documents(data)
    out = TextBuilder()
    for number, document in enumerate(documents, start=1):
        first = len(out.blocks)
        _convert_one(out, document)
        if not options.html_all:
            _set_aside_navigation(out, first, document)
        if len(documents) > 1:
            for i in range(first, len(out.blocks)):
                block = out.blocks[i]
                out.blocks[i] = replace(block, metadata={**block.metadata, "document": number})
    return out.blocks


def _words(text: str) -> list[str]:
    """The text's words, lower case; punctuation at their edges, and tokens without a
    letter or digit (a table's ``|``, a bullet), are not words."""
    return [
        w
        for w in (w.strip(_WORD_EDGES).lower() for w in text.split())
        if any(c.isalnum() for c in w)
    ]


def main_text(data: bytes) -> str | None:
    """The page's main content as trafilatura finds it; ``None`` when it finds none."""
    import trafilatura

    found = trafilatura.extract(
        data, include_tables=True, include_comments=False, favor_recall=True, deduplicate=False
    )
    return found or None


def _set_aside_navigation(out: TextBuilder, first: int, data: bytes) -> None:
    """Type the blocks from ``first`` on that are not the page's main content ``navigation``.

    A block is main content when its words run as in the extracted text: at least
    :data:`MAIN_SHARE` of them inside a run of three words the text has, or, for a block of
    fewer than :data:`SHORT_BLOCK_WORDS` words, all of them in a row (a menu's "Section 1"
    is not main content because the article has the words "section" and "1").
    """
    found = main_text(data)
    if found is None:  # nothing found (a page of only links, or tiny): keep the page whole
        return
    main = _words(found)
    phrase = " " + " ".join(main) + " "
    trigrams = {tuple(main[i : i + 3]) for i in range(len(main) - 2)}
    for i in range(first, len(out.blocks)):
        block = out.blocks[i]
        words = _words(block.content)
        if not words or _is_main(words, phrase, trigrams):
            continue
        metadata = {**block.metadata, "content_type": block.block_type}
        out.blocks[i] = replace(block, block_type="navigation", metadata=metadata)
    # Extractors drop an article's title (it repeats the page's <title>) and some section
    # titles: a heading that opens main content is main content.
    for i in range(len(out.blocks) - 2, first - 1, -1):
        block = out.blocks[i]
        if (
            block.block_type == "navigation"
            and block.metadata.get("content_type") == "heading"
            and out.blocks[i + 1].block_type != "navigation"
        ):
            metadata = {k: v for k, v in block.metadata.items() if k != "content_type"}
            out.blocks[i] = replace(block, block_type="heading", metadata=metadata)


def _is_main(words: list[str], phrase: str, trigrams: set[tuple[str, ...]]) -> bool:
    if len(words) < SHORT_BLOCK_WORDS:
        return f" {' '.join(words)} " in phrase
    covered = [False] * len(words)
    for i in range(len(words) - 2):
        if tuple(words[i : i + 3]) in trigrams:
            covered[i] = covered[i + 1] = covered[i + 2] = True
    return sum(covered) >= MAIN_SHARE * len(words)


def _convert_one(out: TextBuilder, data: bytes) -> None:
    """One HTML document's blocks, appended to ``out``."""
    from lxml import etree, html

    parser = html.HTMLParser()
    try:
        try:
            root = html.document_fromstring(data.decode("utf-8-sig"), parser=parser)
        except UnicodeDecodeError:
            # Its <meta charset> says how to decode it.
            root = html.document_fromstring(data, parser=parser)
    except (etree.ParserError, etree.LxmlError, ValueError):
        raise IngestError(
            "the HTML page cannot be read (it is empty or not HTML); save the page again "
            "from the browser (Save Page As, HTML only) and upload that file"
        ) from None
    if any("Excessive depth" in e.message for e in parser.error_log):
        # libxml2 stops reading there: the rest of the page would be lost without a word.
        raise IngestError(
            "the HTML page nests elements more than 256 deep, which libxml2 refuses to read "
            "on; no page a browser shows needs that. Save the page again from the browser "
            "or strip the nesting, then upload it"
        )
    for element in list(root.iter(*_SKIP)):
        element.drop_tree()
    for br in root.iter("br"):
        br.tail = _BREAK + (br.tail or "")
    body = root.find("body")
    _container(out, body if body is not None else root, 0, 0)


def _text(element: Any) -> str:
    """Text as a browser shows it: runs of whitespace one space, ``<br>`` a new line."""
    return _loose([element.text_content()])


def _loose(parts: list[str]) -> str:
    lines = (" ".join(line.split()) for line in "".join(parts).split(_BREAK))
    return "\n".join(line for line in lines if line)


def _container(out: TextBuilder, element: Any, depth: int, nesting: int) -> None:
    """The blocks inside a container; loose text between them is a paragraph."""
    loose: list[str] = [element.text or ""]
    for child in element:
        tag = child.tag if isinstance(child.tag, str) else None
        if tag is None:  # a comment or processing instruction: only its tail is text
            loose.append(child.tail or "")
            continue
        if tag.lower() in _BLOCK_TAGS and nesting < MAX_DEPTH:
            out.add("paragraph", _loose(loose))
            loose = []
            _element(out, child, tag.lower(), depth, nesting + 1)
            loose.append(child.tail or "")
        else:
            loose.append(child.text_content() + (child.tail or ""))
    out.add("paragraph", _loose(loose))


def _element(out: TextBuilder, element: Any, tag: str, depth: int, nesting: int) -> None:
    if tag in _HEADINGS:
        out.add("heading", " ".join(_text(element).split()), {"level": _HEADINGS[tag]})
    elif tag in _LEAVES:
        out.add(_LEAVES[tag], _text(element))
    elif tag == "pre":
        classes = (element.get("class") or "").split()
        code = element.find("code")
        classes += (code.get("class") or "").split() if code is not None else []
        language = next((c[9:] for c in classes if c.startswith("language-")), None)
        out.add("code", element.text_content().strip("\n"), {"language": language})
    elif tag == "table" and _is_layout(element):
        for cell in _cells_of(element):
            _container(out, cell, depth, nesting + 1)
    elif tag == "table":
        cells = clean_rows([[_text(c) for c in _row_cells(tr)] for tr in _rows_of(element)])
        out.add("table", table_text(cells), {"rows": len(cells), "cells": cells})
    elif tag == "blockquote":
        out.add("blockquote", _text(element))
    elif tag in ("ul", "ol"):
        for item in element.iterchildren("li"):
            _item(out, item, depth, nesting, ordered=tag == "ol")
    elif tag == "li":
        _item(out, element, depth, nesting, ordered=False)
    elif tag != "hr":
        _container(out, element, depth, nesting)


def _rows_of(table: Any) -> list[Any]:
    """A table's own rows, not those of tables nested in its cells."""
    return list(table.xpath("./tr|./thead/tr|./tbody/tr|./tfoot/tr"))


def _row_cells(tr: Any) -> list[Any]:
    return list(tr.xpath("./td|./th"))


def _cells_of(table: Any) -> list[Any]:
    return [cell for tr in _rows_of(table) for cell in _row_cells(tr)]


def _is_layout(table: Any) -> bool:
    """A table used for page layout: it nests another table, or says it presents."""
    if (table.get("role") or "").lower() in ("presentation", "none"):
        return True
    return any(cell.find(".//table") is not None for cell in _cells_of(table))


def _item(out: TextBuilder, item: Any, depth: int, nesting: int, *, ordered: bool) -> None:
    nested = [c for c in item if isinstance(c.tag, str) and c.tag.lower() in ("ul", "ol")]
    parts = [item.text or ""]
    for child in item:
        if child in nested:
            parts.append(child.tail or "")
        elif isinstance(child.tag, str):
            parts.append(child.text_content() + (child.tail or ""))
        else:
            parts.append(child.tail or "")
    out.add("list_item", _loose(parts), {"ordered": ordered, "depth": depth})
    for sub in nested:
        for child in sub.iterchildren("li"):
            _item(out, child, depth + 1, nesting + 1, ordered=sub.tag.lower() == "ol")
