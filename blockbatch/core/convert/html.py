"""HTML into blocks through lxml's HTML parser (libxml2: tolerant of real-world markup).

Headings, paragraphs, list items (without their nested lists, which are blocks of their
own one level deeper), ``pre`` (code, language from a ``language-*`` class), tables (one
block, rows as ``| a | b |``), blockquotes and definition terms each become a block; text
directly inside a container between such elements is a paragraph. Scripts, styles,
templates and the ``head`` are not content. Whitespace collapses as a browser shows it;
``<br>`` is a line break.
"""

from __future__ import annotations

from typing import Any

from blockbatch.core.blocks import IngestError, RawBlock, TextBuilder
from blockbatch.core.convert.limits import check_size

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


def convert_html(data: bytes) -> list[RawBlock]:
    """The HTML page's blocks in document order.

    Raises:
        IngestError: a page too large, or one lxml cannot read at all.
    """
    check_size(data, "HTML page")
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
    out = TextBuilder()
    body = root.find("body")
    _container(out, body if body is not None else root, 0, 0)
    return out.blocks


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
    elif tag == "table":
        rows = [
            "| "
            + " | ".join(" ".join(c.text_content().split()) for c in tr.iter("th", "td"))
            + " |"
            for tr in element.iter("tr")
        ]
        out.add("table", "\n".join(rows), {"rows": len(rows)})
    elif tag == "blockquote":
        out.add("blockquote", _text(element))
    elif tag in ("ul", "ol"):
        for item in element.iterchildren("li"):
            _item(out, item, depth, nesting, ordered=tag == "ol")
    elif tag == "li":
        _item(out, element, depth, nesting, ordered=False)
    elif tag != "hr":
        _container(out, element, depth, nesting)


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
