"""The values the simulated model "answers" for each block.

Some fields are computed for real from the block (``word_count``, ``char_count``,
``first_40_chars``, ``block_type``, ``revised_text``/``revision``/``normalized_text``,
``uid_echo``) so tests can check correctness; every other field gets a plausible value
of the right JSON type, chosen by a hash of the block's content. Values depend only on
the block itself, never on its pack or position: parity between batched and
one-per-call runs relies on it. A question (question mode) gets a plain-text ``answer``
from its own question and context only (blockbatch/simulator/questions.py).

Evidence: a results item schema with an ``evidence`` object of one string per field (what
blockbatch sends when its schema asks for evidence; for the simulator it is structured output
like any other, contract §2) is answered with quotes taken from the block itself
(:func:`quote_for`): a string value that the block holds word for word is its own quote;
any other value quotes a few of the block's words, joined by single spaces as a model
copies them (a quote across a line break then matches only once whitespace is normalised).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from typing import Any

from blockbatch.core.evidence import EVIDENCE_KEY
from blockbatch.simulator.prompt import Block
from blockbatch.simulator.questions import answer_question

_SUMMARY_NAMES = ("summary", "description", "abstract", "gist", "synopsis")
_SCORE_NAMES = ("confidence", "score", "probability", "ratio")


def _normalized(text: str) -> str:
    return " ".join(text.split()).upper()


#: Fields whose value is computed from the block for real.
COMPUTED: dict[str, Any] = {
    "word_count": lambda b: len(b.content.split()),
    "char_count": lambda b: len(b.content),
    "first_40_chars": lambda b: b.content[:40],
    "block_type": lambda b: b.type,
    "revised_text": lambda b: _normalized(b.content),
    "revision": lambda b: _normalized(b.content),
    "normalized_text": lambda b: _normalized(b.content),
    "uid_echo": lambda b: b.uid,
}

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def stable_hash(*parts: str) -> int:
    """A 64-bit hash of ``parts`` that is the same in every process."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def block_result(block: Block, properties: dict[str, Any]) -> dict[str, Any]:
    """One result object: ``block_uid`` plus every property of the items schema."""
    result: dict[str, Any] = {}
    quoted = asks_quotes(properties)
    for name, schema in properties.items():
        if name == "block_uid":
            result[name] = block.uid
        elif name == EVIDENCE_KEY and quoted:
            result[name] = {}  # filled once every value is known
        else:
            result[name] = field_value(name, schema if isinstance(schema, dict) else {}, block)
    if quoted:
        asked = properties[EVIDENCE_KEY].get("properties") or {}
        result[EVIDENCE_KEY] = {
            name: quote_for(block, name, result.get(name)) for name in asked if name in result
        }
    if "block_uid" not in result:
        result = {"block_uid": block.uid, **result}
    return result


def asks_quotes(properties: dict[str, Any]) -> bool:
    """Whether a results item asks for evidence: an ``evidence`` object whose properties
    are strings (one quote per field)."""
    schema = properties.get(EVIDENCE_KEY)
    if not isinstance(schema, dict) or _schema_type(schema) != "object":
        return False
    inner = schema.get("properties")
    return isinstance(inner, dict) and all(
        isinstance(s, dict) and s.get("type") == "string" for s in inner.values()
    )


#: The longest quote the simulated model gives: a phrase, as the request asks, even where
#: the block's "words" are long (a URL, a hash, a line of minified code).
QUOTE_MAX_CHARS = 120


def quote_for(block: Block, name: str, value: Any) -> str:
    """The words of ``block`` that the simulated model quotes for field ``name``'s value
    (module docstring): the value itself when the block holds it, else a few of the
    block's words chosen by a hash of the field and the content."""
    content = block.content
    if isinstance(value, str) and value.strip() and value in content:
        return value[:QUOTE_MAX_CHARS]
    words = content.split()
    if not words:
        return content
    h = stable_hash("quote", name, content)
    start = h % len(words)
    # A prefix of the joined words still matches once whitespace is normalised.
    return " ".join(words[start : start + 3 + h % 6])[:QUOTE_MAX_CHARS].rstrip()


def foreign_quote(content: str, key: str) -> str:
    """A plausible quote that ``content`` certainly does not hold, in any case or spacing
    (the ``bad_quote`` fault: a model quoting words its block does not have)."""
    folded = " ".join(content.split()).lower()
    h = stable_hash("foreign", key)
    words = [_DECOY_WORDS[(h + 7 * i) % len(_DECOY_WORDS)] for i in range(4)]
    quote = " ".join(words)
    n = 0
    while quote.lower() in folded:
        quote = f"{quote} {_DECOY_WORDS[n % len(_DECOY_WORDS)]}"
        n += 1
    return quote


#: Bounds a structured-outputs grammar cannot hold travel in the description instead, as
#: the SDKs write them (``anthropic.lib._parse._transform.transform_schema``:
#: ``"A number\n\n{minimum: 1, maximum: 10}"``; contract §2, "The Python/TS/Ruby/PHP SDKs
#: can strip unsupported keywords into descriptions"). A model reads them like any
#: instruction, and the simulated model follows them as it follows the schema's own.
DESCRIBED_BOUNDS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
)
_DESCRIBED = re.compile(r"\{((?:[A-Za-z]+: [^{}]*?)(?:, [A-Za-z]+: [^{}]*?)*)\}\s*$")


def described_bounds(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the bounds its description carries (:data:`DESCRIBED_BOUNDS`)
    added where the schema itself does not set them."""
    description = schema.get("description")
    match = _DESCRIBED.search(description) if isinstance(description, str) else None
    if match is None:
        return schema
    extra: dict[str, Any] = {}
    for part in match.group(1).split(", "):
        key, _, raw = part.partition(": ")
        if key in DESCRIBED_BOUNDS and key not in schema:
            try:
                extra[key] = int(raw)
            except ValueError:
                try:
                    extra[key] = float(raw)
                except ValueError:
                    continue
    return {**schema, **extra} if extra else schema


def field_value(name: str, schema: dict[str, Any], block: Block) -> Any:
    """The value of field ``name`` for ``block``, conforming to ``schema``.

    A question's string field ``answer`` is its plain-text answer (blockbatch/simulator/questions.py).
    """
    schema = described_bounds(schema)
    if block.question and name == "answer" and _schema_type(schema) == "string":
        return _fit_string(answer_question(block.content, block.context), schema)
    if name in COMPUTED:
        value = COMPUTED[name](block)
        if _schema_type(schema) == "string" and isinstance(value, int) and "enum" not in schema:
            value = str(value)
        if _conforms(value, schema):
            return _fit_string(value, schema) if isinstance(value, str) else value
    return generate(schema, block.content, name)


def _schema_type(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def _conforms(value: Any, schema: dict[str, Any]) -> bool:
    if "enum" in schema:
        return value in schema["enum"]
    kind = _schema_type(schema)
    if isinstance(value, bool) and kind != "boolean":
        return False
    if not isinstance(value, _JSON_TYPES.get(kind, (object,))):
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return False
        if "maximum" in schema and value > schema["maximum"]:
            return False
    return True


def _fit_string(value: str, schema: dict[str, Any]) -> str:
    max_length = schema.get("maxLength")
    if isinstance(max_length, int):
        value = value[:max_length]
    min_length = schema.get("minLength")
    if isinstance(min_length, int) and len(value) < min_length:
        value = value + "." * (min_length - len(value))
    return value


def _bounds(schema: dict[str, Any], kind: str, name: str) -> tuple[float, float]:
    step = 1 if kind == "integer" else 0.01
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    if "minimum" not in schema and "exclusiveMinimum" in schema:
        low = schema["exclusiveMinimum"] + step
    high = schema.get("maximum")
    if high is None and "exclusiveMaximum" in schema:
        high = schema["exclusiveMaximum"] - step
    default_span = 1 if kind == "number" and any(s in name for s in _SCORE_NAMES) else 100
    if low is None:
        low = 0 if high is None or high >= 0 else high - default_span
    if high is None:
        high = low + default_span
    return low, high


def generate(schema: dict[str, Any], content: str, path: str) -> Any:
    """A deterministic value for ``schema``, chosen by a hash of ``content`` and ``path``."""
    schema = described_bounds(schema)
    h = stable_hash(path, content)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][h % len(schema["enum"])]
    for combinator in ("anyOf", "oneOf", "allOf"):
        options = schema.get(combinator)
        if isinstance(options, list) and options:
            choice = next((o for o in options if o.get("type") != "null"), options[0])
            return generate(choice, content, path)
    name = path.rsplit(".", 1)[-1].lower()
    kind = _schema_type(schema)
    if kind == "null":
        return None
    if kind == "boolean":
        return h % 2 == 0
    if kind in ("integer", "number"):
        low, high = _bounds(schema, kind, name)
        if kind == "integer":
            low, high = int(low), int(high)
            return low + h % (high - low + 1)
        return round(low + (high - low) * (h % 10_001) / 10_000, 2)
    if kind == "array":
        return _array(schema, content, path, h)
    if kind == "object":
        properties = schema.get("properties") or {}
        return {
            key: generate(sub if isinstance(sub, dict) else {}, content, f"{path}.{key}")
            for key, sub in properties.items()
        }
    return _fit_string(_string(schema, content, name, h), schema)


def _array(schema: dict[str, Any], content: str, path: str, h: int) -> list[Any]:
    raw_items = schema.get("items")
    items: dict[str, Any] = raw_items if isinstance(raw_items, dict) else {}
    low = int(schema.get("minItems", 1))
    high = int(schema.get("maxItems", max(low, 3)))
    count = low + h % (max(low, high) - low + 1)
    values: list[Any] = []
    for index in range(count):
        value = generate(items, content, f"{path}[{index}]")
        if schema.get("uniqueItems") and value in values:
            continue
        values.append(value)
    return values


def _string(schema: dict[str, Any], content: str, name: str, h: int) -> str:
    words = content.split()
    fmt = schema.get("format")
    if fmt in ("date", "date-time"):
        day = dt.date(2020, 1, 1) + dt.timedelta(days=h % 2000)
        return day.isoformat() if fmt == "date" else f"{day.isoformat()}T00:00:00Z"
    if fmt == "email":
        return f"user{h % 1000}@example.com"
    if fmt in ("uri", "url"):
        return f"https://example.com/{h % 100000}"
    if any(s in name for s in _SUMMARY_NAMES):
        return "About: " + " ".join(words[:6])
    if name in ("title", "heading", "headline"):
        return " ".join(words[:6]).title()
    if name in ("language", "lang"):
        return "en"
    if not words:
        return name or "n/a"
    start = h % len(words)
    return " ".join(words[start : start + 1 + h % 3])


#: Words of the decoy texts that wrong answers are generated from: a block's own words
#: would leave a wrong summary too close to the right one.
_DECOY_WORDS = (
    "amber",
    "basalt",
    "cobalt",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kelp",
    "lagoon",
    "meadow",
    "nectar",
    "obsidian",
    "pebble",
    "quartz",
    "raven",
    "saffron",
    "tundra",
    "umber",
    "velvet",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
    "canyon",
    "orchid",
    "lantern",
    "mosaic",
    "prairie",
    "thistle",
)


def decoy_value(name: str, schema: dict[str, Any], value: Any, key: str, attempt: int) -> Any:
    """A value of ``schema``'s type for field ``name`` that is likely not ``value``.

    For a model's plausible mistake: another ``enum`` member, the boolean flipped, a number
    or text generated from a decoy text (``key`` and ``attempt`` pick it). ``None`` when
    the schema allows nothing else (a ``const``, a one-member ``enum``). The caller checks
    that the value really differs and conforms.
    """
    h = stable_hash("decoy", key, str(attempt), name)
    if "const" in schema:
        return None
    members = schema.get("enum")
    if isinstance(members, list):
        others = [m for m in members if m != value]
        return others[h % len(others)] if others else None
    if _schema_type(schema) == "boolean" and isinstance(value, bool):
        return not value
    words = [_DECOY_WORDS[stable_hash(str(h), str(i)) % len(_DECOY_WORDS)] for i in range(12)]
    return generate(schema, " ".join(words), name)


def wrong_type(schema: dict[str, Any]) -> Any:
    """A value that certainly does not match ``schema``'s type (for malformed answers)."""
    kind = _schema_type(schema)
    return {
        "string": 12345,
        "integer": "not-a-number",
        "number": "not-a-number",
        "boolean": "maybe",
        "array": "not-an-array",
        "object": "not-an-object",
    }.get(kind, ["unexpected"])
