"""Evidence: each value of an answer traced to the words of its block that support it.

A schema asks for evidence with ``prompt_config.evidence``. Each result then carries, next
to its fields, an object under :data:`EVIDENCE_KEY` holding one quote per field: the exact
passage of the block's own ``block_content`` that supports the value
(:func:`evidence_schema` is that object's schema in the answer, on every channel). The
quotes are not trusted: :func:`ground` looks each one up in the block's text and records
where it is, so a reviewer sees the span and an export carries it.

| the quote | ``match`` | ``start``/``end`` | ``reason`` |
|---|---|---|---|
| found as written | ``exact`` | the first occurrence | none |
| found once whitespace runs are one space and case is folded (NFKC, casefold) | ``normalised`` | the span of the block's own characters it covers | none |
| not found that way either | ``missing`` | none | ``quote_not_found`` |
| absent, empty or not a string | ``missing`` | none | ``no_quote`` |

Only fields the answer gives a value to are grounded (a left-out optional field or a
``null`` has nothing to support). A value whose quote is ``missing`` is **ungrounded**:
the overlay is still staged (the value may be right), and it carries the review reason code
``ungrounded`` (blockbatch/core/reasons.py) so the review grid can list it; it is never a
failure and never asked again. Spans are offsets in Python characters (code points) into
``block_content``, ``end`` exclusive, as ``content[start:end]`` reads them.
"""

from __future__ import annotations

import itertools
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel

#: The key of a result's evidence object; no field of a schema asking for evidence may
#: be called so (blockbatch/core/schema.py).
EVIDENCE_KEY = "evidence"

Match = Literal["exact", "normalised", "missing"]
#: Why a value is ungrounded.
MissingReason = Literal["no_quote", "quote_not_found"]

#: What the answer schema says of the evidence object and of each quote: the model reads it.
EVIDENCE_DESCRIPTION = (
    "For each field you give a value, the exact passage of this block's own block_content "
    "that supports it, copied character for character (a few words up to one sentence)."
)
QUOTE_DESCRIPTION = "The exact words of this block's block_content that support {field}."
#: The rule the system prompt adds when a schema asks for evidence.
EVIDENCE_RULE = (
    'Each result also has an "evidence" object: for every field you give a value, the '
    "shortest passage of that block's own block_content that supports the value, copied "
    "exactly (same words, spelling and punctuation; never paraphrased, never from another "
    "block). When nothing in the block supports a value, quote the words that come closest."
)

#: The quote one field's evidence is expected to be, in tokens, for planning: a phrase or
#: a short sentence (bounded by the block itself), plus the key and the JSON around it.
QUOTE_TOKENS = 16
QUOTE_OVERHEAD_TOKENS = 4
#: The evidence object's own key and braces.
EVIDENCE_OVERHEAD_TOKENS = 5


class FieldEvidence(BaseModel):
    """Where one value's quote is in its block (module docstring's table)."""

    quote: str | None = None
    match: Match
    start: int | None = None
    end: int | None = None
    reason: MissingReason | None = None

    @property
    def grounded(self) -> bool:
        return self.match != "missing"


def evidence_schema(properties: Mapping[str, Any], required: Iterable[str]) -> dict[str, Any]:
    """The evidence object's JSON Schema in a result: one string per field, the schema's
    required fields required (a plain schema: it fits the structured-outputs subset)."""
    return {
        "type": "object",
        "description": EVIDENCE_DESCRIPTION,
        "properties": {
            name: {"type": "string", "description": QUOTE_DESCRIPTION.format(field=name)}
            for name in properties
        },
        "required": [name for name in required if name in properties],
        "additionalProperties": False,
    }


def quotes_of(raw: Any, fields: Iterable[str]) -> dict[str, str]:
    """The quotes a result's evidence object gives for ``fields`` (anything else ignored:
    a malformed evidence object leaves its values ungrounded, never the result invalid)."""
    if not isinstance(raw, Mapping):
        return {}
    return {name: raw[name] for name in fields if isinstance(raw.get(name), str)}


def _folded(text: str) -> tuple[str, list[int]]:
    """``text`` with whitespace runs as one space and case folded, and for each character
    of it the index of the character of ``text`` it came from."""
    out: list[str] = []
    where: list[int] = []
    in_space = False
    for i, ch in enumerate(text):
        if ch.isspace():
            if not in_space and out:
                out.append(" ")
                where.append(i)
            in_space = True
            continue
        in_space = False
        for piece in unicodedata.normalize("NFKC", ch).casefold():
            out.append(piece)
            where.append(i)
    if out and out[-1] == " ":
        out.pop()
        where.pop()
    return "".join(out), where


def locate(quote: Any, text: str) -> FieldEvidence:
    """Find ``quote`` in ``text``: exactly, else normalised (module docstring)."""
    if not isinstance(quote, str) or not quote.strip():
        return FieldEvidence(
            quote=quote if isinstance(quote, str) else None, match="missing", reason="no_quote"
        )
    at = text.find(quote)
    if at >= 0:
        return FieldEvidence(quote=quote, match="exact", start=at, end=at + len(quote))
    folded_text, where = _folded(text)
    folded_quote, _ = _folded(quote)
    at = folded_text.find(folded_quote) if folded_quote else -1
    if at < 0:
        return FieldEvidence(quote=quote, match="missing", reason="quote_not_found")
    last = at + len(folded_quote) - 1
    return FieldEvidence(quote=quote, match="normalised", start=where[at], end=where[last] + 1)


def ground(quotes: Mapping[str, Any], overlay: Mapping[str, Any], text: str) -> dict[str, Any]:
    """Each valued field of ``overlay`` with where its quote is in ``text``, as stored with
    the overlay (``overlays.evidence``): ``{field: {quote, match, start, end, reason}}``."""
    return {
        name: locate(quotes.get(name), text).model_dump(exclude_none=True)
        for name, value in overlay.items()
        if value is not None
    }


def ungrounded(evidence: Mapping[str, Any] | None) -> list[str]:
    """The fields of a stored evidence object whose quote was not found."""
    return [
        name
        for name, e in (evidence or {}).items()
        if isinstance(e, Mapping) and e.get("match") == "missing"
    ]


def spans(evidence: Mapping[str, Any] | None, length: int) -> list[tuple[int, int, list[str]]]:
    """The stretches of a block of ``length`` characters that quotes cover, in order, each
    with the fields whose quote covers it (quotes may overlap): what the grid highlights."""
    marks = [
        (int(e["start"]), int(e["end"]), name)
        for name, e in (evidence or {}).items()
        if isinstance(e, Mapping)
        and isinstance(e.get("start"), int)
        and isinstance(e.get("end"), int)
        and 0 <= e["start"] < e["end"] <= length
    ]
    cuts = sorted({p for s, e, _ in marks for p in (s, e)})
    out: list[tuple[int, int, list[str]]] = []
    for a, b in itertools.pairwise(cuts):
        names = [n for s, e, n in marks if s <= a and b <= e]
        if names:
            out.append((a, b, names))
    return out


class GroundingCount(BaseModel):
    """How many values of some answers were grounded, and how."""

    values: int = 0
    exact: int = 0
    normalised: int = 0
    missing: int = 0

    @property
    def grounded(self) -> int:
        return self.exact + self.normalised

    @property
    def rate(self) -> float | None:
        return self.grounded / self.values if self.values else None

    def add(self, evidence: Mapping[str, Any] | None) -> None:
        for e in (evidence or {}).values():
            match = e.get("match") if isinstance(e, Mapping) else None
            if match in ("exact", "normalised", "missing"):
                self.values += 1
                setattr(self, match, getattr(self, match) + 1)


def grounding_text(
    count: GroundingCount,
    ungrounded_blocks: int | None = None,
    sampled: tuple[GroundingCount, GroundingCount] | None = None,
) -> str:
    """``grounding 99.4% of 1,234 values (1,200 exact, 27 normalised); 7 ungrounded in 5
    blocks; sampled blocks: packed 97.5%, alone 100.0%``, or ``no value to ground``.
    ``sampled``: the quality probe's blocks counted in their packed answers and alone."""
    if not count.values:
        return "no value to ground"
    text = (
        f"grounding {100 * (count.rate or 0):.1f}% of {count.values:,} values "
        f"({count.exact:,} exact, {count.normalised:,} normalised)"
    )
    if count.missing:
        n = ungrounded_blocks
        blocks = f" in {n:,} block{'s' if n != 1 else ''}" if n is not None else ""
        text += f"; {count.missing:,} ungrounded{blocks}"
    if sampled is not None and sampled[0].values and sampled[1].values:
        packed, alone = sampled
        text += (
            f"; sampled blocks: packed {100 * (packed.rate or 0):.1f}%, "
            f"alone {100 * (alone.rate or 0):.1f}%"
        )
    return text


def evidence_text(tokens: int, blocks: int, cost_usd: float, total_usd: float) -> str:
    """The quote's line on evidence: ``evidence: the quotes add about 9,200 output tokens
    (92 a block), $0.0460 of the $0.2100 quoted (22%)``."""
    share = f" ({cost_usd / total_usd:.0%})" if total_usd > 0 else ""
    return (
        f"evidence: the quotes add about {tokens:,} output tokens "
        f"({tokens / blocks:,.0f} a block), ${cost_usd:.4f} of the ${total_usd:.4f} "
        f"quoted{share}"
    )
