"""How the review grid shows and edits one schema field, and what a row's form changes.

Each field gets the control its schema asks for: a choice (``<select>``) for an ``enum``, a
boolean, or a small bounded integer; a short text box for numbers and short strings; a
text area, a whole line wide, for long strings and JSON values. A row has one form for all
its fields: :func:`planned_edits` turns what was typed into the changes to make, checking
every one against the schema (``blockbatch.core.review``) before anything is written, so a row saves
all its changes or none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from blockbatch.core.review import (
    EditError,
    edited_overlay,
    field_types,
    parse_field_input,
    takes_text,
)
from blockbatch.core.schema import SchemaSpec

#: A bounded integer with at most this many values is a choice, not a text box.
MAX_INTEGER_CHOICES = 11
#: A string allowed at most this many characters is a one-line box; longer ones get an area.
SHORT_STRING = 60

Control = Literal["select", "input", "textarea"]
#: How much of the row's field grid a control takes: one cell, two, or the whole line.
Span = Literal[1, 2, "all"]


@dataclass(frozen=True)
class Widget:
    """One field's control: its kind, the choices of a select, and its width."""

    control: Control
    #: (text sent, label shown) of each choice of a select, in the schema's order.
    choices: tuple[tuple[str, str], ...] = ()
    span: Span = 1
    #: Characters a text box is sized for (numbers are short).
    size: int = 12

    @property
    def values(self) -> tuple[str, ...]:
        """The texts a select sends, one per choice."""
        return tuple(value for value, _ in self.choices)


def input_text(prop: dict[str, Any], value: Any) -> str:
    """``value`` as the text that edits it: in a field that takes a string, a string as
    is and ``null`` as an empty box; anything else as JSON (what
    :func:`blockbatch.core.review.parse_field_input` reads back)."""
    if takes_text(prop):
        if isinstance(value, str):
            return value
        if value is None and "null" in field_types(prop):
            return ""
    return json.dumps(value, ensure_ascii=False)


def widget(prop: dict[str, Any]) -> Widget:
    """The control for a field with schema ``prop``."""
    kind = prop.get("type")
    if "enum" in prop:
        choices = tuple(
            (input_text(prop, v), v if isinstance(v, str) else json.dumps(v)) for v in prop["enum"]
        )
        longest = max((len(label) for _, label in choices), default=0)
        return Widget("select", choices, span=2 if longest > 16 else 1)
    if kind == "boolean":
        return Widget("select", (("true", "true"), ("false", "false")))
    if (
        kind == "integer"
        and isinstance(prop.get("minimum"), int)
        and isinstance(prop.get("maximum"), int)
        and 0 <= prop["maximum"] - prop["minimum"] < MAX_INTEGER_CHOICES
    ):
        values = range(prop["minimum"], prop["maximum"] + 1)
        return Widget("select", tuple((str(v), str(v)) for v in values))
    if kind in ("integer", "number"):
        return Widget("input", size=8)
    if kind == "string" or (takes_text(prop) and field_types(prop) <= {"string", "null"}):
        max_length = prop.get("maxLength")
        if isinstance(max_length, int) and max_length <= SHORT_STRING:
            return Widget("input", span=2 if max_length > 16 else 1, size=min(max_length, 40))
        return Widget("textarea", span="all")
    return Widget("textarea", span="all")  # arrays, objects, several types: JSON


def field_texts(spec: SchemaSpec, overlay: dict[str, Any] | None) -> dict[str, str]:
    """Each field's text in the row's form (empty for a field the overlay does not have)."""
    overlay = overlay or {}
    return {
        f: input_text(spec.properties[f], overlay[f]) if f in overlay else ""
        for f in spec.properties
    }


def own_changes(
    typed: dict[str, str], was: dict[str, str], now: dict[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """What a reviewer changed in a row's form, and which of those fields someone else
    changed since the page was read.

    Args:
        typed: each field's text as the form sent it.
        was: each field's text when the page was read (fields without one count as changed).
        now: each field's text as staged now (:func:`field_texts`).

    Returns:
        ``(changed, stale)``: the fields whose text differs from what the page showed (a
        field left as shown is not this reviewer's change, so another's edit since stays),
        and of them, those staged differently now than the page showed, with their text now.
    """
    changed = {f: t for f, t in typed.items() if f not in was or t != was[f]}
    stale = {f: now[f] for f in changed if f in was and f in now and now[f] != was[f]}
    return changed, stale


@dataclass
class PlannedEdits:
    """What a row's form changes: each changed field's new value, in schema order, or the
    reason each refused field cannot take what was typed (then nothing is to change)."""

    changes: dict[str, Any]
    errors: dict[str, str]


def planned_edits(spec: SchemaSpec, staged: dict[str, Any], typed: dict[str, str]) -> PlannedEdits:
    """The edits a row's form asks for, checked together against the schema.

    A field is unchanged when its text is the staged value's own text, or when it is empty
    and the overlay has no such field. Each change is applied in turn to the staged
    overlay and the result validated (:func:`blockbatch.core.review.edited_overlay`), so the overlay
    after all of them is one the schema accepts.
    """
    shown = field_texts(spec, staged)
    changes: dict[str, Any] = {}
    errors: dict[str, str] = {}
    overlay = dict(staged)
    for field in spec.properties:
        text = typed.get(field)
        if text is None or text == shown[field]:
            continue
        try:
            value = parse_field_input(spec, field, text)
            if field in staged and staged[field] == value and type(staged[field]) is type(value):
                continue  # the same value typed another way (`12` for `12`, spaces)
            overlay = edited_overlay(spec, overlay, field, value)
        except EditError as err:
            errors[field] = str(err)
            continue
        changes[field] = value
    return PlannedEdits({} if errors else changes, errors)
