"""Does packing cost quality? A block's packed answer against its answer alone.

A block answered in a pack of many is also asked alone (the probe, ``calibrate``); this
module compares the two answers field by field and sums the verdicts. It is pure: answers
in, verdicts and tallies out.

The rules, per field of the schema (``block_uid`` is never compared):

========================  =====================================================  =======
field value                agree when                                             kind
========================  =====================================================  =======
number                     ints equal; a float within ``FLOAT_REL_TOL`` (relative)  exact
boolean, ``null``          equal                                                  exact
string in an ``enum``,     equal after :func:`normalize_text` (strip, casefold,   exact
with a ``format``, or at   collapse whitespace)
most ``SHORT_TEXT_CHARS``
array, object              canonical JSON equal, strings normalised as above,     exact
                           floats that are whole numbers written as ints
longer string (free text)  ``text_similarity(a, b) >= TEXT_AGREE_AT``             text
absent on one side         never                                                  (schema)
absent on both sides       always (neither answer gave the optional field)       (schema)
========================  =====================================================  =======

A string field is free text when the schema does not pin it down (no ``enum``, no
``format``, no ``maxLength`` of at most ``SHORT_TEXT_CHARS``) and the longer of the two
normalised values is longer than ``SHORT_TEXT_CHARS``; a label, a code or a name is
compared exactly, a summary by similarity.

A block agrees when every field agrees. :func:`summarize` tallies blocks, fields, pack
sizes and positions; :class:`Tally` gives a rate with its Wilson score interval, so a rate
measured on 40 blocks says how little 40 blocks can tell.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from blockbatch.core.schema import RESERVED_FIELD, SchemaSpec

#: Strings of at most this many characters (after normalisation) are compared exactly:
#: names, labels, codes, dates, short answers. 32 holds a person's or company's name or a
#: short phrase; a sentence is longer and is compared by similarity.
SHORT_TEXT_CHARS = 32

#: Free text agrees when :func:`text_similarity` reaches this. Token F1 of 0.5 means the
#: two answers share about half their words: a rewording of the same summary stays above
#: it, a summary of a neighbouring block (or of nothing in the block) falls well below.
TEXT_AGREE_AT = 0.5

#: Two floats agree within this relative tolerance: it absorbs a decimal written back
#: from binary (0.1 + 0.2), not a different answer (0.71 against 0.72 disagree).
FLOAT_REL_TOL = 1e-6

FieldKind = Literal["exact", "text"]

_WORDS = re.compile(r"\w+")
_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class FieldAgreement:
    """One field of one block: do the packed and the single answer agree?

    Attributes:
        field: the field's name.
        kind: ``exact`` (compared for equality) or ``text`` (compared by similarity).
        agree: the verdict.
        similarity: :func:`text_similarity` of a ``text`` field; ``None`` for ``exact``
            and when a value is absent.
    """

    field: str
    kind: FieldKind
    agree: bool
    similarity: float | None = None


def normalize_text(text: str) -> str:
    """Stripped, casefolded, every run of whitespace one space."""
    return _WS.sub(" ", text.strip()).casefold()


def text_similarity(a: str, b: str) -> float:
    """Token-level F1 of two texts, in [0, 1] (1: the same words, in any order).

    Both texts are normalised (:func:`normalize_text`) and split into words (``\\w+``,
    punctuation dropped); F1 is the harmonic mean of the share of ``a``'s words found in
    ``b`` and of ``b``'s found in ``a``, counting repeated words as often as they occur
    (the SQuAD answer metric). Token F1 rather than a character ratio (difflib): two
    answers that say the same thing in another order or with other punctuation should
    agree, and a summary that keeps the sentence frame but names the neighbour's facts
    should not; F1 is also symmetric, deterministic and linear in the texts' length.
    Two empty texts are identical (1.0); one empty text shares nothing (0.0).
    """
    left = _WORDS.findall(normalize_text(a))
    right = _WORDS.findall(normalize_text(b))
    if not left and not right:
        return 1.0
    if not left or not right:
        return 0.0
    common = sum((Counter(left) & Counter(right)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(left), common / len(right)
    return 2 * precision * recall / (precision + recall)


def field_kind(schema: Mapping[str, Any]) -> FieldKind:
    """How a field is compared when its values do not say (one of them is absent)."""
    if _is_string_schema(schema) and not _short_by_schema(schema):
        return "text"
    return "exact"


def compare_field(
    name: str,
    schema: Mapping[str, Any],
    packed: Any,
    single: Any,
    *,
    packed_present: bool = True,
    single_present: bool = True,
) -> FieldAgreement:
    """The verdict on one field (the module docstring's table)."""
    if not packed_present or not single_present:
        both_absent = not packed_present and not single_present
        return FieldAgreement(name, field_kind(schema), both_absent, None)
    if isinstance(packed, str) and isinstance(single, str):
        left, right = normalize_text(packed), normalize_text(single)
        if _short_by_schema(schema) or max(len(left), len(right)) <= SHORT_TEXT_CHARS:
            return FieldAgreement(name, "exact", left == right, None)
        similarity = text_similarity(packed, single)
        return FieldAgreement(name, "text", similarity >= TEXT_AGREE_AT, similarity)
    return FieldAgreement(name, "exact", _values_equal(packed, single), None)


def compare_properties(
    properties: Mapping[str, Any], packed: Mapping[str, Any], single: Mapping[str, Any]
) -> list[FieldAgreement]:
    """Every field of ``properties`` (not ``block_uid``), in the schema's order."""
    verdicts = []
    for name, schema in properties.items():
        if name == RESERVED_FIELD:
            continue
        verdicts.append(
            compare_field(
                name,
                schema if isinstance(schema, Mapping) else {},
                packed.get(name),
                single.get(name),
                packed_present=name in packed,
                single_present=name in single,
            )
        )
    return verdicts


def compare_answers(
    schema: SchemaSpec, packed: Mapping[str, Any], single: Mapping[str, Any]
) -> list[FieldAgreement]:
    """A block's packed answer against its single answer, one verdict per schema field."""
    return compare_properties(schema.properties, packed, single)


def _is_string_schema(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    return "string" in kinds or (
        kind is None
        and "enum" not in schema
        and "const" not in schema
        and "properties" not in schema
        and "items" not in schema
    )


def _short_by_schema(schema: Mapping[str, Any]) -> bool:
    if "enum" in schema or "const" in schema or "format" in schema:
        return True
    max_length = schema.get("maxLength")
    return isinstance(max_length, int) and max_length <= SHORT_TEXT_CHARS


def _values_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return math.isclose(a, b, rel_tol=FLOAT_REL_TOL, abs_tol=0.0)
    if isinstance(a, list | dict) or isinstance(b, list | dict):
        return _canonical(a) == _canonical(b)
    if isinstance(a, str) and isinstance(b, str):
        return normalize_text(a) == normalize_text(b)
    return bool(a == b) and type(a) is type(b)


def _canonical(value: Any) -> str:
    return json.dumps(_normalized(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _normalized(value: Any) -> Any:
    if isinstance(value, str):
        return normalize_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_normalized(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _normalized(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------- tallies


@dataclass
class Tally:
    """How many of ``total`` compared things agreed."""

    agreed: int = 0
    total: int = 0

    @property
    def rate(self) -> float | None:
        """The share that agreed (``None`` before anything was compared)."""
        return self.agreed / self.total if self.total else None

    def interval(self, z: float = 1.96) -> tuple[float, float]:
        """The Wilson score interval of the rate (``z`` 1.96: 95%); (0, 1) when empty.

        Wilson rather than the normal approximation: it stays inside [0, 1] and is honest
        at small samples and rates near 100%, where a probe lives (40 of 40 agreeing is
        an interval of 91.2-100%, not a certainty).
        """
        n = self.total
        if n == 0:
            return (0.0, 1.0)
        p = self.agreed / n
        z2 = z * z
        centre = (p + z2 / (2 * n)) / (1 + z2 / n)
        half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
        # At 0 or n agreeing the bound is exactly 0 or 1 (centre - half and centre + half
        # are that only up to rounding, and a true rate of 100% must lie inside).
        low = 0.0 if self.agreed == 0 else max(0.0, centre - half)
        high = 1.0 if self.agreed == n else min(1.0, centre + half)
        return (low, high)

    def add(self, agree: bool, n: int = 1) -> None:
        """Count ``n`` more comparisons with this verdict."""
        self.total += n
        self.agreed += n if agree else 0


@dataclass
class Sample:
    """One sampled block: where it sat in its pack and the verdict on each field.

    Attributes:
        block_uid: the block.
        pack_size: blocks in the call that gave its packed answer.
        position: its place in that call, 1 for the first block.
        fields: :func:`compare_answers` of its packed and single answers.
    """

    block_uid: str
    pack_size: int
    position: int
    fields: list[FieldAgreement] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        """Every field agrees."""
        return all(f.agree for f in self.fields)


#: Buckets of pack sizes and of positions in a pack (1-based), as ``summarize`` keys them.
PACK_SIZE_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("1-5", 1, 5),
    ("6-10", 6, 10),
    ("11-20", 11, 20),
    ("21-50", 21, 50),
    ("51+", 51, None),
)
POSITION_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("first 5", 1, 5),
    ("6-20", 6, 20),
    ("21+", 21, None),
)


def pack_size_bucket(size: int) -> str:
    """The ``by_pack_size`` key of a pack of ``size`` blocks."""
    return _bucket(PACK_SIZE_BUCKETS, size)


def position_bucket(position: int) -> str:
    """The ``by_position`` key of a block at ``position`` (1-based) in its pack."""
    return _bucket(POSITION_BUCKETS, position)


def _bucket(buckets: tuple[tuple[str, int, int | None], ...], value: int) -> str:
    for name, low, high in buckets:
        if value >= low and (high is None or value <= high):
            return name
    return buckets[0][0]  # below the first bucket's low (0, negative): counted with it


@dataclass
class AgreementSummary:
    """Agreement over sampled blocks: overall (a block agrees when every field does),
    per field, per pack-size bucket and per position bucket (only buckets with samples).

    Attributes:
        lowest_field: the field with the lowest agreement (``None`` without samples).
    """

    blocks: Tally = field(default_factory=Tally)
    by_field: dict[str, Tally] = field(default_factory=dict)
    by_pack_size: dict[str, Tally] = field(default_factory=dict)
    by_position: dict[str, Tally] = field(default_factory=dict)
    lowest_field: str | None = None


def summarize(samples: Iterable[Sample]) -> AgreementSummary:
    """Tally ``samples`` (the buckets keep :data:`PACK_SIZE_BUCKETS`' order)."""
    blocks: list[SampleCount] = []
    fields: list[FieldCount] = []
    for sample in samples:
        blocks.append(SampleCount(sample.pack_size, sample.position, sample.agrees, 1))
        fields += [FieldCount(v.field, v.agree, 1) for v in sample.fields]
    return summarize_counts(blocks, fields)


@dataclass(frozen=True)
class SampleCount:
    """``n`` sampled blocks at one pack size and position with one verdict."""

    pack_size: int
    position: int
    agrees: bool
    n: int


@dataclass(frozen=True)
class FieldCount:
    """``n`` verdicts ``agree`` on ``field``."""

    field: str
    agree: bool
    n: int


def summarize_counts(
    blocks: Iterable[SampleCount], fields: Iterable[FieldCount]
) -> AgreementSummary:
    """:func:`summarize` of samples already counted by pack size, position and verdict, and
    their fields by name and verdict (a large run's are counted in Postgres,
    ``store/quality.py`` ``agreement``). ``by_field`` keeps ``fields``' order."""
    summary = AgreementSummary()
    sizes: dict[str, Tally] = {}
    positions: dict[str, Tally] = {}
    for c in blocks:
        summary.blocks.add(c.agrees, c.n)
        sizes.setdefault(pack_size_bucket(c.pack_size), Tally()).add(c.agrees, c.n)
        positions.setdefault(position_bucket(c.position), Tally()).add(c.agrees, c.n)
    for f in fields:
        summary.by_field.setdefault(f.field, Tally()).add(f.agree, f.n)
    summary.by_pack_size = {n: sizes[n] for n, _, _ in PACK_SIZE_BUCKETS if n in sizes}
    summary.by_position = {n: positions[n] for n, _, _ in POSITION_BUCKETS if n in positions}
    rated = [(t.rate, -t.total, name) for name, t in summary.by_field.items() if t.rate is not None]
    summary.lowest_field = min(rated)[2] if rated else None
    return summary


def percent(rate: float) -> str:
    """A rate as a percentage with one decimal (``98.6%``)."""
    return f"{rate * 100:.1f}%"


def _whole_percent(rate: float) -> str:
    text = f"{rate * 100:.0f}%"
    # 99.6% is not 100%: a field that disagreed once must not read as perfect.
    return percent(rate) if text == "100%" and rate < 1 else text


def agreement_text(summary: AgreementSummary) -> str:
    """One line: ``agreement 98.6% on 40 sampled blocks (95% CI 93.1-99.8%); lowest:
    summary 92%`` (``lowest`` only when a field fell below 100%)."""
    tally = summary.blocks
    if tally.rate is None:
        return "agreement: no sampled blocks yet"
    low, high = tally.interval()
    noun = "block" if tally.total == 1 else "blocks"
    text = (
        f"agreement {percent(tally.rate)} on {tally.total} sampled {noun} "
        f"(95% CI {low * 100:.1f}-{high * 100:.1f}%)"
    )
    lowest = summary.lowest_field
    if lowest is not None:
        rate = summary.by_field[lowest].rate
        if rate is not None and rate < 1:
            text += f"; lowest: {lowest} {_whole_percent(rate)}"
    return text


# ---------------------------------------------------------------- sampling


def sample_size(count: int, rate: float, minimum: int) -> int:
    """``max(minimum, ceil(rate * count))``, at most ``count``."""
    if not 0 <= rate <= 1:
        raise ValueError(f"a sampling rate is between 0 and 1, got {rate}")
    if minimum < 0:
        raise ValueError(f"a sample's minimum is 0 or more, got {minimum}")
    # round first: 0.03 * 100 is 3.0000000000000004, which must not become 4
    wanted = max(minimum, math.ceil(round(rate * count, 9)))
    return min(count, wanted)


def sample_blocks(block_uids: Sequence[str], rate: float, minimum: int, seed: str) -> list[str]:
    """A deterministic sample of ``block_uids``, in their order.

    Each block is ranked by SHA-256 of ``seed`` and its uid (not Python's ``random``, whose
    sequence may change between versions and which a workflow must not use); the
    :func:`sample_size` lowest ranks are taken. The same seed and blocks give the same
    sample in every process; a block's membership does not depend on the other blocks'
    order, and a larger sample of the same seed contains the smaller one.

    Raises:
        ValueError: ``rate`` outside [0, 1] or a negative ``minimum``.
    """
    size = sample_size(len(block_uids), rate, minimum)
    if size == 0:
        return []
    ranked = sorted(block_uids, key=lambda uid: (_rank(seed, uid), uid))
    chosen = set(ranked[:size])
    return [uid for uid in block_uids if uid in chosen]


def _rank(seed: str, uid: str) -> bytes:
    return hashlib.sha256(f"{seed}\x1f{uid}".encode()).digest()
