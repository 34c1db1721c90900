"""The simulated model's plain-text answer to one question (question mode).

The answer depends only on the question and its own context, never on the other questions
of the request, so a test can tell when questions, instructions or contexts got mixed:

* simple arithmetic (``What is 2+2?``) is answered with the number (``4``);
* a language the question asks for (``Answer only in French: ...``) is the language of
  the answer: its words and its lead (``Réponse``) are that language's, English otherwise;
* ``name a colour`` / ``fruit`` / ``animal`` gives one such word in that language, picked
  by a hash of the question and its context;
* anything else echoes the question's first words after the language's lead;
* a context is quoted at the end (its first words, after the language's "from the
  context"), so each answer shows which context it was given.
"""

from __future__ import annotations

import hashlib
import re

_LANGUAGE = re.compile(r"\bin (english|french|german|spanish|italian)\b", re.IGNORECASE)
_CODES = {"english": "en", "french": "fr", "german": "de", "spanish": "es", "italian": "it"}
_LEAD = {"en": "Answer", "fr": "Réponse", "de": "Antwort", "es": "Respuesta", "it": "Risposta"}
_FROM_CONTEXT = {
    "en": "from the context",
    "fr": "d'après le contexte",
    "de": "laut dem Kontext",
    "es": "según el contexto",
    "it": "secondo il contesto",
}

#: Words the simulated model names, by kind and language.
WORDS: dict[str, dict[str, tuple[str, ...]]] = {
    "colour": {
        "en": ("red", "blue", "green", "yellow"),
        "fr": ("rouge", "bleu", "vert", "jaune"),
        "de": ("rot", "blau", "grün", "gelb"),
        "es": ("rojo", "azul", "verde", "amarillo"),
        "it": ("rosso", "blu", "verde", "giallo"),
    },
    "fruit": {
        "en": ("apple", "pear", "plum", "cherry"),
        "fr": ("pomme", "poire", "prune", "cerise"),
        "de": ("Apfel", "Birne", "Pflaume", "Kirsche"),
        "es": ("manzana", "pera", "ciruela", "cereza"),
        "it": ("mela", "pera", "prugna", "ciliegia"),
    },
    "animal": {
        "en": ("cat", "dog", "horse", "owl"),
        "fr": ("chat", "chien", "cheval", "hibou"),
        "de": ("Katze", "Hund", "Pferd", "Eule"),
        "es": ("gato", "perro", "caballo", "búho"),
        "it": ("gatto", "cane", "cavallo", "gufo"),
    },
}
_NAME_A = re.compile(r"\bname (?:a|an|one) (colou?r|fruit|animal)\b", re.IGNORECASE)
_ARITHMETIC = re.compile(r"(-?\d+(?:\.\d+)?)\s*([-+*/×x])\s*(-?\d+(?:\.\d+)?)")


def language(question: str) -> str:
    """The language code a question asks its answer in (``en`` when it names none)."""
    found = _LANGUAGE.search(question)
    return _CODES[found.group(1).lower()] if found else "en"


def answer_question(question: str, context: str | None) -> str:
    """The simulated model's answer to ``question`` given its own ``context``."""
    sums = _ARITHMETIC.search(question)
    if sums is not None:
        return _compute(float(sums.group(1)), sums.group(2), float(sums.group(3)))
    lang = language(question)
    named = _NAME_A.search(question)
    if named is not None:
        kind = "colour" if named.group(1).lower().startswith("colo") else named.group(1).lower()
        words = WORDS[kind][lang]
        digest = hashlib.sha256(f"{question}\x1f{context or ''}".encode()).digest()
        answer = words[int.from_bytes(digest[:8], "big") % len(words)]
    else:
        answer = f"{_LEAD[lang]}: {' '.join(question.split()[:8])}"
    if context:
        answer += f" ({_FROM_CONTEXT[lang]}: {' '.join(context.split()[:8])})"
    return answer


def _compute(a: float, op: str, b: float) -> str:
    if op == "+":
        value = a + b
    elif op == "-":
        value = a - b
    elif op in "*×x":
        value = a * b
    elif b == 0:
        return "undefined (division by zero)"
    else:
        value = a / b
    return str(int(value)) if value == int(value) else f"{value:.6g}"
