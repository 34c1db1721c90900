"""The JSON Schema subset of structured outputs, as the API checks it (contract §2).

It applies to ``output_config.format.schema`` and to every tool with ``strict: true``; the
request builder has its own check of the same rules, and the two agree through tests.

Rules (contract §2, "Supported JSON Schema subset"):

- every object schema (``type: "object"``, or one with ``properties``) carries
  ``additionalProperties: false``;
- ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf``,
  ``minLength``, ``maxLength``, ``maxItems``, ``uniqueItems``, ``contains`` are refused,
  and so is an array ``minItems`` other than 0 or 1;
- ``$ref`` is local only (``#/$defs/...``, ``#/definitions/...``), never recursive (a
  definition that reaches itself through ``$ref``, or a ``$ref`` to ``#``), and not beside
  ``allOf``.

Complexity, summed over all strict schemas of one request ("Complexity limits"): at most 20
strict tools, 24 optional parameters and 16 union-typed parameters; beyond, a 400 "Schema is
too complex for compilation". A *parameter* is one entry of an object schema's
``properties``, wherever that object sits (the root, a nested object, array items, a
``$defs`` entry: a definition counts once, however often it is referenced). It is
*optional* when its name is not in that object's ``required``; it is *union-typed* when its
schema has ``anyOf`` or a ``type`` list of more than one type (``["string", "null"]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blockbatch.simulator.errors import invalid

MAX_STRICT_TOOLS = 20
MAX_OPTIONAL_PARAMETERS = 24
MAX_UNION_PARAMETERS = 16
UNSUPPORTED = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "maxItems",
    "uniqueItems",
    "contains",
)
_TOO_COMPLEX = "Schema is too complex for compilation"


@dataclass
class Complexity:
    """What one or more strict schemas add up to."""

    optional: int = 0
    unions: int = 0


def check_strict_schemas(schemas: list[tuple[str, dict[str, Any]]]) -> Complexity:
    """Check every strict schema of a request (``(where, schema)``) and their sum.

    Raises:
        ApiError: 400 invalid_request_error naming the place and the rule.
    """
    tools = sum(1 for where, _ in schemas if where.startswith("tools."))
    if tools > MAX_STRICT_TOOLS:
        raise invalid(f"{_TOO_COMPLEX}: {tools} strict tools (at most {MAX_STRICT_TOOLS})")
    total = Complexity()
    for where, schema in schemas:
        _Walker(schema, where, total).run()
    if total.optional > MAX_OPTIONAL_PARAMETERS:
        raise invalid(
            f"{_TOO_COMPLEX}: {total.optional} optional parameters across strict "
            f"schemas (at most {MAX_OPTIONAL_PARAMETERS})"
        )
    if total.unions > MAX_UNION_PARAMETERS:
        raise invalid(
            f"{_TOO_COMPLEX}: {total.unions} union-typed parameters across strict "
            f"schemas (at most {MAX_UNION_PARAMETERS})"
        )
    return total


class _Walker:
    """One schema's walk: checks every node, counts parameters, follows local refs."""

    def __init__(self, root: dict[str, Any], where: str, total: Complexity) -> None:
        self.root, self.where, self.total = root, where, total
        self.definitions: dict[str, Any] = {}
        for key in ("$defs", "definitions"):
            defs = root.get(key)
            if isinstance(defs, dict):
                self.definitions.update({f"#/{key}/{name}": d for name, d in defs.items()})

    def run(self) -> None:
        self.node(self.root, self.where)
        for ref, definition in self.definitions.items():
            self.node(definition, f"{self.where}{ref[1:].replace('/', '.')}")
            self.reaches(ref, definition, (ref,))

    def reaches(self, origin: str, node: Any, path: tuple[str, ...]) -> None:
        """Refuse a ``$ref`` cycle through ``origin`` (recursion, contract §2)."""
        for ref in _refs(node):
            if ref == origin:
                raise invalid(
                    f"{self.where}: recursive schemas are not supported "
                    f"({' -> '.join((*path, ref))})"
                )
            if ref not in path and ref in self.definitions:
                self.reaches(origin, self.definitions[ref], (*path, ref))

    def node(self, node: Any, where: str) -> None:
        if not isinstance(node, dict):
            return
        if "$ref" in node:
            self.ref(node, where)
        for keyword in UNSUPPORTED:
            if keyword in node:
                raise invalid(
                    f"{where}: '{keyword}' is not supported in structured outputs schemas"
                )
        if "minItems" in node and node["minItems"] not in (0, 1):
            raise invalid(
                f"{where}: 'minItems' values other than 0 or 1 are not supported "
                "in structured outputs schemas"
            )
        is_object = node.get("type") == "object" or "properties" in node
        if is_object and node.get("additionalProperties") is not False:
            raise invalid(
                f"{where}: For 'object' type, 'additionalProperties' must be "
                "explicitly set to false"
            )
        properties = node.get("properties")
        if isinstance(properties, dict):
            required = node.get("required") or []
            for name, schema in properties.items():
                if name not in required:
                    self.total.optional += 1
                if isinstance(schema, dict) and _is_union(schema):
                    self.total.unions += 1
                self.node(schema, f"{where}.properties.{name}")
        items = node.get("items")
        if isinstance(items, dict):
            self.node(items, f"{where}.items")
        for keyword in ("anyOf", "allOf"):
            for index, branch in enumerate(node.get(keyword) or []):
                self.node(branch, f"{where}.{keyword}.{index}")

    def ref(self, node: dict[str, Any], where: str) -> None:
        ref = node["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise invalid(
                f"{where}.$ref: external references are not supported in "
                f"structured outputs schemas: {ref!r}"
            )
        if ref == "#":
            raise invalid(f"{where}.$ref: recursive schemas are not supported")
        if ref not in self.definitions:
            raise invalid(f"{where}.$ref: reference {ref!r} not found in $defs or definitions")
        if "allOf" in node:
            raise invalid(f"{where}: 'allOf' together with '$ref' is not supported")


def _is_union(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return "anyOf" in schema or (isinstance(kind, list) and len(kind) > 1)


def _refs(node: Any) -> list[str]:
    """Every ``$ref`` inside ``node`` (not following them)."""
    found: list[str] = []
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            found.append(node["$ref"])
        for key, value in node.items():
            if key not in ("$defs", "definitions"):
                found += _refs(value)
    elif isinstance(node, list):
        for value in node:
            found += _refs(value)
    return found
