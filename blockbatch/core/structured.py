"""A JSON Schema in the structured-outputs subset, or why it cannot be (contract §2).

Structured outputs (a ``strict`` tool, ``output_config.format``) constrain the answer by a
grammar compiled from the schema, and the API takes only a subset of JSON Schema for it.
:func:`translate` turns a schema into that subset:

| keyword | in the subset |
|---|---|
| ``type``, ``properties``, ``required``, ``items``, ``enum`` (primitives), ``const``, ``anyOf``, ``allOf``, local ``$ref`` with ``$defs``/``definitions``, ``default``, ``description``, ``title`` | kept |
| ``oneOf`` | kept as ``anyOf`` (looser; the answer is validated against the original after) |
| ``format`` | kept when one of :data:`FORMATS`, else dropped |
| ``pattern`` | kept when simple (:func:`simple_pattern`), else the schema does not fit |
| ``minItems`` | 0 or 1; a larger one becomes 1 |
| every object | ``additionalProperties: false`` (a free-form object or a map does not fit) |
| ``minLength``, ``maxLength``, ``minimum``, ``maximum``, ``exclusive*``, ``multipleOf``, ``maxItems``, ``uniqueItems`` | dropped from the grammar and told in the node's ``description`` as the SDKs do (``{minimum: 0, maximum: 3}``, :data:`DESCRIBED`) |
| ``*Properties``, ``contains``, ``examples`` ... | dropped (:data:`DROPPED`) |
| ``not``, ``if``/``then``/``else``, ``patternProperties``, ``prefixItems``, ``unevaluated*``, ... | the schema does not fit (:data:`UNEXPRESSIBLE`) |
| anything else | dropped: no validator gives it a meaning |

The schema does not fit either when it is recursive, an ``allOf`` meets a ``$ref``, a node
says nothing of its type (any value), or it counts more than :data:`MAX_OPTIONAL` optional
or :data:`MAX_UNIONS` union-typed parameters (``anyOf``, or a ``type`` list), the limits of
one request's strict schemas. What is dropped loosens the grammar only: the answer is
still validated against the user's whole schema (``blockbatch.core.results``), and the field
definitions still tell the model every bound (``blockbatch.core.prompt.field_definitions``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

#: ``format`` values the subset takes.
FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6", "uuid"}
)
#: Optional (not required) properties, summed over a request's strict schemas.
MAX_OPTIONAL = 24
#: Union-typed parameters (``anyOf``, or a list of types), summed likewise.
MAX_UNIONS = 16
#: The largest ``{n,m}`` bound a pattern may use. The contract says only "large {n,m}"
#: is refused; this line is ours, on the careful side.
MAX_PATTERN_REPEAT = 100

#: Bounds the grammar cannot hold: left out, checked by us after the answer.
DROPPED = frozenset(
    {
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "contains",
        "minContains",
        "maxContains",
        "examples",
        "$comment",
        "readOnly",
        "writeOnly",
        "deprecated",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
        "$schema",
        "$id",
    }
)
#: Of those, the bounds told to the model in the node's description instead, as the SDKs'
#: ``transform_schema`` writes them (``"A number\n\n{minimum: 1, maximum: 10}"``): the
#: grammar does not hold them, but a model reads them next to the field they bound.
DESCRIBED = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
)
#: Structure the subset cannot say: a schema using one of these does not fit.
UNEXPRESSIBLE = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "patternProperties",
        "propertyNames",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "prefixItems",
        "additionalItems",
        "unevaluatedProperties",
        "unevaluatedItems",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "$anchor",
    }
)
_TYPED_BY = ("type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref")
_PRIMITIVE = (str, int, float, bool, type(None))
_LOOKAROUND = ("(?=", "(?!", "(?<=", "(?<!")
_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")


class _Unfit(Exception):
    """The schema cannot be expressed in the subset."""


@dataclass
class _Tally:
    optional: int = 0
    unions: int = 0


def translate(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``schema`` in the structured-outputs subset, or ``None`` when it does not fit.

    A fresh structure: ``schema`` is not changed.
    """
    tally = _Tally()
    try:
        out = _node(schema, tally)
        _check_refs(out)
    except _Unfit:
        return None
    if tally.optional > MAX_OPTIONAL or tally.unions > MAX_UNIONS:
        return None
    return out


def counts(schema: Mapping[str, Any]) -> tuple[int, int]:
    """``(optional, union-typed)`` parameters of ``schema`` as the limits count them.

    Raises:
        ValueError: the schema does not fit the subset for another reason.
    """
    tally = _Tally()
    try:
        _node(schema, tally)
    except _Unfit as unfit:
        raise ValueError(str(unfit)) from None
    return tally.optional, tally.unions


def simple_pattern(pattern: str) -> bool:
    """Whether a regex is in the subset: no backreference, lookaround or ``\\b``, no
    repeat bound above :data:`MAX_PATTERN_REPEAT`, and a valid regex at all."""
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\":
            escaped = pattern[i + 1 : i + 2]
            if escaped in ("b", "B", "k") or (escaped.isdigit() and escaped != "0"):
                return False
            i += 2
            continue
        if pattern.startswith(_LOOKAROUND, i):
            return False
        i += 1
    for repeat in _REPEAT.finditer(pattern):
        bounds = [b for b in repeat.groups() if b]
        if any(int(b) > MAX_PATTERN_REPEAT for b in bounds):
            return False
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def _node(node: Any, tally: _Tally) -> dict[str, Any]:
    if not isinstance(node, Mapping):
        raise _Unfit("a boolean schema")
    if not any(key in node for key in _TYPED_BY):
        raise _Unfit("a schema without a type (any value)")
    if "anyOf" in node and "oneOf" in node:
        raise _Unfit("both anyOf and oneOf")
    out: dict[str, Any] = {}
    described: dict[str, Any] = {}
    for key, value in node.items():
        if key in UNEXPRESSIBLE:
            raise _Unfit(key)
        if key == "type":
            out[key] = _type(value, tally)
        elif key in ("enum", "const"):
            values = value if key == "enum" else [value]
            if not isinstance(values, list) or not all(isinstance(v, _PRIMITIVE) for v in values):
                raise _Unfit(f"{key} of non-primitive values")
            out[key] = value
        elif key in ("default", "description", "title", "required"):
            out[key] = value
        elif key == "format":
            if value in FORMATS:
                out[key] = value
        elif key == "pattern":
            if not isinstance(value, str) or not simple_pattern(value):
                raise _Unfit("a pattern the subset does not take")
            out[key] = value
        elif key == "minItems":
            out[key] = min(value, 1) if isinstance(value, int) else value
            if isinstance(value, int) and value > 1:
                described[key] = value
        elif key in DESCRIBED:
            described[key] = value
        elif key in ("properties", "$defs", "definitions"):
            if not isinstance(value, Mapping):
                raise _Unfit(key)
            out[key] = {name: _node(sub, tally) for name, sub in value.items()}
        elif key == "items":
            out[key] = _node(value, tally)
        elif key in ("anyOf", "oneOf", "allOf"):
            if not isinstance(value, list) or not value:
                raise _Unfit(key)
            if key == "allOf" and ("$ref" in node or any(_refers(v) for v in value)):
                raise _Unfit("allOf with $ref")
            if key != "allOf":
                tally.unions += 1
            out["anyOf" if key == "oneOf" else key] = [_node(v, tally) for v in value]
        elif key == "$ref":
            if not isinstance(value, str) or not value.startswith("#/"):
                raise _Unfit("a $ref that is not local")
            out[key] = value
        elif key == "additionalProperties" and value is not False:
            raise _Unfit("additionalProperties other than false (a map)")
        # Anything else is dropped: a bound we check after the answer (DROPPED), or a
        # keyword no validator gives a meaning.
    if described:
        told = "{" + ", ".join(f"{key}: {value}" for key, value in described.items()) + "}"
        description = out.get("description")
        out["description"] = f"{description}\n\n{told}" if isinstance(description, str) else told
    types = _types(node)
    if "object" in types or "properties" in node:
        if not isinstance(node.get("properties"), Mapping):
            raise _Unfit("an object without properties (free-form)")
        out["additionalProperties"] = False
        required = node.get("required") or []
        tally.optional += sum(1 for name in node["properties"] if name not in required)
    if "array" in types and "items" not in node:
        raise _Unfit("an array without items")
    return out


def _type(value: Any, tally: _Tally) -> Any:
    if isinstance(value, list):
        if not value or not all(isinstance(t, str) for t in value):
            raise _Unfit("a bad type list")
        if len(value) > 1:
            tally.unions += 1
    elif not isinstance(value, str):
        raise _Unfit("a bad type")
    return value


def _types(node: Mapping[str, Any]) -> list[str]:
    declared = node.get("type")
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    return [declared] if isinstance(declared, str) else []


def _refers(node: Any) -> bool:
    return any(True for _ in _refs(node))


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _check_refs(root: dict[str, Any]) -> None:
    """Every ``$ref`` resolves within ``root``, and none leads back to itself."""

    def target(ref: str) -> Any:
        node: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                raise _Unfit(f"a $ref that does not resolve: {ref}")
            node = node[part]
        return node

    def visit(ref: str, path: tuple[str, ...]) -> None:
        if ref in path:
            raise _Unfit("a recursive schema")
        for inner in _refs(target(ref)):
            visit(inner, (*path, ref))

    for ref in _refs(root):
        visit(ref, ())
