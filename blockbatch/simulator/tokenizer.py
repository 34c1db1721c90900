"""The simulator's own deterministic tokenizers, one per tokenizer generation.

Not Claude's tokenizer (that one is not public), but shaped like a BPE tokenizer's
output: letters are split into chunks of :data:`WORD_CHUNK` characters, digits into groups
of :data:`DIGIT_CHUNK`, runs of punctuation into pairs (so JSON's ``{"`` and ``",`` are one
token each, as in a BPE vocabulary); whitespace is free. That is the ``old`` generation.

The ``new`` generation (the 5.x and 4.7+ models, contract §0 rule 8: about 30% more
tokens for the same text) counts ``ceil(old * 1.3)`` per text piece (the scale is
``blockbatch.core.registry.TOKENIZER_SCALE``, computed as an exact fraction so ``10`` old tokens are
``13`` new ones, never ``14`` by float rounding). Scaling each piece with ``ceil`` keeps
the counts additive the way the API's are: a prompt is the sum of its pieces (tool
definitions, system blocks, message blocks), every piece costs at least what it costs on
the old tokenizer, and the whole is within one token per piece of ``1.3x`` the old
count. :meth:`Tokenizer.truncate` cuts at old-token boundaries: the longest prefix whose
scaled count fits.

Every token count the simulator reports (usage, count_tokens, cache sizes, limits,
truncation) uses the request model's tokenizer (:func:`tokenizer_for`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

from blockbatch.core.registry import TOKENIZER_SCALE, ModelInfo

WORD_CHUNK = 4
DIGIT_CHUNK = 3
PUNCT_CHUNK = 2

_PIECES = re.compile(r"(?P<word>[^\W\d_]+)|(?P<digits>\d+)|(?P<other>(?:[^\w\s]|_)+)")
_CHUNK = {"word": WORD_CHUNK, "digits": DIGIT_CHUNK, "other": PUNCT_CHUNK}


def iter_token_spans(text: str) -> Iterator[tuple[int, int]]:
    """Yield ``(start, end)`` character spans of the old tokenizer's tokens of ``text``."""
    for match in _PIECES.finditer(text):
        start, end = match.span()
        chunk = _CHUNK[match.lastgroup or "other"]
        for pos in range(start, end, chunk):
            yield pos, min(pos + chunk, end)


def count_tokens(text: str) -> int:
    """Number of tokens in ``text`` on the old tokenizer."""
    return sum(1 for _ in iter_token_spans(text))


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` that holds at most ``max_tokens`` old tokens."""
    return OLD.truncate(text, max_tokens)


@dataclass(frozen=True)
class Tokenizer:
    """One tokenizer generation: old-tokenizer counts scaled by ``scale`` (rounded up)."""

    name: str
    scale: Fraction

    def scaled(self, old_tokens: int) -> int:
        """``ceil(old_tokens * scale)``, exactly."""
        return -(-old_tokens * self.scale.numerator // self.scale.denominator)

    def count(self, text: str) -> int:
        """Number of tokens in ``text``."""
        return self.scaled(count_tokens(text))

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` whose count is at most ``max_tokens``."""
        end = 0
        for index, (_, span_end) in enumerate(iter_token_spans(text)):
            if self.scaled(index + 1) > max_tokens:
                break
            end = span_end
        return text[:end]


def _tokenizer(name: str) -> Tokenizer:
    return Tokenizer(name=name, scale=Fraction(str(TOKENIZER_SCALE[name])))


OLD = _tokenizer("old")
NEW = _tokenizer("new")
_BY_NAME = {"old": OLD, "new": NEW}


def tokenizer_for(model: ModelInfo) -> Tokenizer:
    """The tokenizer of ``model``'s generation (``blockbatch.core.registry.ModelInfo.tokenizer``)."""
    return _BY_NAME[model.tokenizer]
