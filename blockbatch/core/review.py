"""Review rules: what a person may do to a block's overlay, and checking an edited value.

A person reviews a run's staged overlays (``ai_complete``): edits a field in place, then
confirms the block (staging copied to confirmed) or rejects it, and may reopen a confirmed
block to correct it (back to staged). These are pure rules; the
state transitions themselves live in ``blockbatch/store/overlays.py`` and every act is recorded in
``review_actions`` (migrations 009, 022).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from blockbatch.core.schema import SchemaSpec

ReviewAction = Literal["edit", "confirm", "reject", "reopen"]

#: Every overlay status, in the order pages show them.
OVERLAY_STATUSES = (
    "pending",
    "ai_complete",
    "failed",
    "cancelled",
    "confirmed",
    "rejected",
    "set_aside",
)
#: Statuses whose block the model answered (the run's "done"): a person's decision on an
#: answer does not make the run's work undone.
ANSWERED = ("ai_complete", "confirmed", "rejected")
#: The only status whose staged values a person may edit, confirm or reject.
REVIEWABLE = "ai_complete"


class EditError(ValueError):
    """An edited value that cannot be staged; the message says why, next to the field."""


def field_types(prop: dict[str, Any]) -> frozenset[str]:
    """The JSON types a field's schema allows: its ``type`` (a name or a list of names), or
    the types of its ``anyOf`` / ``oneOf`` branches; empty when it says none."""
    kind = prop.get("type")
    if isinstance(kind, str):
        return frozenset({kind})
    if isinstance(kind, list):
        return frozenset(k for k in kind if isinstance(k, str))
    branches = prop.get("anyOf") or prop.get("oneOf")
    if isinstance(branches, list):
        return frozenset().union(*(field_types(b) for b in branches if isinstance(b, dict)))
    return frozenset()


def takes_text(prop: dict[str, Any]) -> bool:
    """Whether a field takes a string: what a person types into it is taken as typed
    (a JSON value only where it is one of the field's other types, such as ``null``)."""
    return "string" in field_types(prop)


def parse_field_input(spec: SchemaSpec, field: str, text: str) -> Any:
    """The value a person typed for ``field``: as typed for a field that takes a string,
    else JSON.

    A field whose schema allows a string (``"string"``, ``["string", "null"]``, an
    ``anyOf`` with a string branch) takes the text as typed, so nobody has to quote a
    sentence. Where it also allows other types, text that is JSON of one of them is that
    value (``null``, ``12``), and an empty box is ``null`` when the field allows it. Any
    other field takes JSON (``12``, ``true``, ``["a"]``, ``null``).

    Raises:
        EditError: an unknown field, or text that is not JSON for a field that takes no
            string.
    """
    if field not in spec.properties:
        raise EditError(
            f"the schema has no field {field!r}; its fields are: " + ", ".join(spec.properties)
        )
    prop = spec.properties[field]
    types = field_types(prop)
    if "string" in types:
        others = types - {"string"}
        if not others:
            return text
        if not text.strip() and "null" in others:
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return text
        return value if _json_type(value) & others else text
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        kind = " or ".join(sorted(types)) or "JSON"
        raise EditError(
            f"{field}: {text!r} is not a JSON value ({err.msg}); this field takes {kind}"
        ) from None


def _json_type(value: Any) -> set[str]:
    """The JSON Schema types ``value`` is an instance of."""
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number"} | ({"integer"} if value.is_integer() else set())
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list):
        return {"array"}
    return {"object"}


def edited_overlay(
    spec: SchemaSpec, staged: dict[str, Any], field: str, value: Any
) -> dict[str, Any]:
    """The staged overlay with ``field`` set to ``value``, checked against the schema.

    Raises:
        EditError: the overlay would not validate (the message names the field and the
            rule it breaks, as a failed model result's ``last_error`` does).
    """
    if field not in spec.properties:
        raise EditError(
            f"the schema has no field {field!r}; its fields are: " + ", ".join(spec.properties)
        )
    overlay = {**staged, field: value}
    errors = list(Draft202012Validator(spec.overlay_json_schema()).iter_errors(overlay))
    if errors:
        error = best_match(errors)
        where = ".".join(str(p) for p in error.absolute_path) or field
        raise EditError(f"{where}: {_broken_rule(error)}")
    return overlay


#: Length rules jsonschema words by repeating the whole value ("'...' is too long"):
#: (what is counted, the bound's words).
_LENGTH_RULES = {
    "maxLength": ("characters", "at most"),
    "minLength": ("characters", "at least"),
    "maxItems": ("items", "at most"),
    "minItems": ("items", "at least"),
}


def _broken_rule(error: Any) -> str:
    """The rule a value breaks, in words that state the limit: ``214 characters;
    at most 160 characters`` rather than the value repeated and ``is too long``."""
    rule = _LENGTH_RULES.get(error.validator)
    if rule is None or not isinstance(error.instance, str | list):
        return str(error.message)
    unit, bound = rule
    size = len(error.instance)
    return f"{size} {unit}; {bound} {error.validator_value} {unit}"


def id_columns(
    columns: list[str] | None,
    text_column: str | None,
    chosen: list[str] | None,
    present: list[str],
) -> list[str]:
    """The input's columns that say which row a block is, shown with each block.

    Args:
        columns: the input's own columns in file order (``None``: not known, e.g. a
            markdown document, or one stored before columns were kept).
        text_column: the column that held the text (never an identity).
        chosen: the columns a person asked for (``--id-column``); ``None``: the default,
            the first column other than the text.
        present: the metadata keys the blocks have, to check ``chosen`` against when the
            columns are not known.

    Raises:
        ValueError: a chosen column the input does not have (the message lists them).
    """
    if chosen:
        known = columns if columns is not None else present
        unknown = [c for c in chosen if c not in known]
        if unknown:
            have = ", ".join(c for c in known if c != text_column) or "none"
            raise ValueError(
                f"the input has no column {', '.join(map(repr, unknown))}; its columns are: {have}"
            )
        return list(dict.fromkeys(chosen))
    if columns is None:
        return []
    return [c for c in columns if c != text_column][:1]


def row_identity(metadata: dict[str, Any], columns: list[str]) -> str:
    """``ticket_id T-0011`` (each id column and its value, those the block has)."""
    return "  ".join(
        f"{c} {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
        for c in columns
        if (v := metadata.get(c)) not in (None, "")
    )
