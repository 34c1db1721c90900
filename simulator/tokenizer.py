"""The simulator's own deterministic tokenizer.

Not Claude's tokenizer (that one is not public), but shaped like a BPE tokenizer's
output: letters are split into chunks of :data:`WORD_CHUNK` characters, digits into groups
of :data:`DIGIT_CHUNK`, runs of punctuation into pairs (so JSON's ``{"`` and ``",`` are one
token each, as in a BPE vocabulary); whitespace is free. Every token count the
simulator reports (usage, count_tokens, limits, caching) comes from here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

WORD_CHUNK = 4
DIGIT_CHUNK = 3
PUNCT_CHUNK = 2

_PIECES = re.compile(r"(?P<word>[^\W\d_]+)|(?P<digits>\d+)|(?P<other>(?:[^\w\s]|_)+)")
_CHUNK = {"word": WORD_CHUNK, "digits": DIGIT_CHUNK, "other": PUNCT_CHUNK}


def iter_token_spans(text: str) -> Iterator[tuple[int, int]]:
    """Yield ``(start, end)`` character spans of the tokens of ``text``, in order."""
    for match in _PIECES.finditer(text):
        start, end = match.span()
        chunk = _CHUNK[match.lastgroup or "other"]
        for pos in range(start, end, chunk):
            yield pos, min(pos + chunk, end)


def count_tokens(text: str) -> int:
    """Number of tokens in ``text``."""
    return sum(1 for _ in iter_token_spans(text))


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` that holds at most ``max_tokens`` tokens."""
    end = 0
    for index, (_, span_end) in enumerate(iter_token_spans(text)):
        if index >= max_tokens:
            break
        end = span_end
    return text[:end]
