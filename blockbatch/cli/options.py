"""Options from one place: the option models' fields are the command line's options.

A command-line option that sets a field of an option model (``RunOptions``,
``QualityOptions``, ``StreamTriggers``, ...) takes its help, its default, its choices and its
bounds from that field (:func:`add_field_option`), so the help cannot drift from what a run
uses. The common fields have an option of their own (``--pack-size``); every other field of
``RunOptions`` and of the models nested in it is set with one generic, repeatable option,
``--set KEY=VALUE`` (:func:`add_settings`), checked against the model as it is parsed. A
field's description reads ``(none: ...)`` for what its ``None`` default means; an option
of its own says ``(default: ...)`` instead, since leaving the option out is what gives it.
"""

from __future__ import annotations

import argparse
import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from blockbatch.core.run_types import RunOptions

#: Words that give a field that allows it no value (its ``None``).
NONE_WORDS = ("none", "null")


@dataclass(frozen=True)
class FieldOption:
    """An option of its own for one field of an option model."""

    flag: str
    model: type[BaseModel]
    field: str
    metavar: str | None = None
    #: What leaving the option out gives, when it is not the field's default (``--model``:
    #: the schema's model first).
    default_text: str | None = None
    #: Turns the option's text into a value for the field to check (``2s`` -> 2.0); may
    #: refuse text in words of its own (ArgumentTypeError).
    convert: Callable[[str], object] | None = None
    #: Said after the field's description, for this option only (the units it takes).
    note: str | None = None
    #: Choices this option takes beyond the field's own, resolved by the command before
    #: the options are built (``--mode cheapest``).
    extra_choices: tuple[str, ...] = ()

    @property
    def info(self) -> FieldInfo:
        return self.model.model_fields[self.field]

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def cli_default(self) -> object:
        """What ``args.<dest>`` holds when the option is left out: the field's default,
        or ``None`` when leaving it out means something else (:attr:`default_text`)."""
        return None if self.default_text is not None else self.info.default


def _inner(annotation: Any) -> tuple[Any, bool]:
    """The annotation without ``| None``, and whether ``None`` was allowed."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], len(args) < len(typing.get_args(annotation))
    return annotation, False


def choices_of(info: FieldInfo) -> list[str] | None:
    """The values a ``Literal`` field takes, else ``None``."""
    inner, _ = _inner(info.annotation)
    if typing.get_origin(inner) is Literal:
        return [str(a) for a in typing.get_args(inner)]
    return None


def nested_model(info: FieldInfo) -> type[BaseModel] | None:
    """The option model a field holds (``RunOptions.quality``), else ``None``."""
    inner, _ = _inner(info.annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def parse_field(model: type[BaseModel], field: str, text: str) -> object:
    """``text`` as a value of ``model.field``, checked against the field's type and bounds.

    ``none`` / ``null`` give ``None`` where the field allows it; ``true`` / ``false`` (and
    pydantic's other spellings) a bool; numbers parse as pydantic parses them from text.

    Raises:
        ValueError: a value the field does not take, saying why.
    """
    _, optional = _inner(model.model_fields[field].annotation)
    value = None if optional and text.strip().lower() in NONE_WORDS else text
    return check_field(model, field, value, text)


def check_field(model: type[BaseModel], field: str, value: object, text: str) -> object:
    """``value`` (read from ``text``) as ``model.field`` validates it.

    Raises:
        ValueError: the field's own reason, e.g. ``input should be greater than 0, got '0'``.
    """
    try:
        checked = model.__pydantic_validator__.validate_assignment(
            model.model_construct(), field, value
        )
    except ValidationError as err:
        reason = err.errors()[0]["msg"]
        raise ValueError(f"{reason[:1].lower()}{reason[1:]}, got {text!r}") from None
    return getattr(checked, field)


def show(value: object) -> str:
    """A default as a user types it: ``true``, ``none``, ``5m``, ``0.03``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def field_help(
    info: FieldInfo, *, default_text: str | None = None, note: str | None = None, own_option: bool
) -> str:
    """A field's description with its default, as option help (``%`` escaped for argparse)."""
    text = (info.description or "").strip()
    if note:
        text = f"{text}; {note}"
    if default_text is not None:
        text = f"{text} (default: {default_text})"
    elif info.default is None:
        if own_option:
            text = text.replace("(none: ", "(default: ")
    else:
        text = f"{text} (default {show(info.default)})"
    return text.replace("%", "%%")


def add_field_option(p: argparse.ArgumentParser, option: FieldOption) -> argparse.Action:
    """Add ``option`` to ``p``: help, default, choices and checks from its field."""
    info = option.info
    help_ = field_help(info, default_text=option.default_text, note=option.note, own_option=True)
    choices = choices_of(info)
    if choices:
        choices = [*choices, *option.extra_choices]
        return p.add_argument(
            option.flag, dest=option.dest, choices=choices, default=option.cli_default, help=help_
        )

    def checked(text: str) -> object:
        try:
            if option.convert is None:
                return parse_field(option.model, option.field, text)
            return check_field(option.model, option.field, option.convert(text), text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return p.add_argument(
        option.flag,
        dest=option.dest,
        type=checked,
        default=option.cli_default,
        metavar=option.metavar,
        help=help_,
    )


# ------------------------------------------------------------------------- --set KEY=VALUE


@dataclass(frozen=True)
class Setting:
    """One ``--set`` key: a field of ``RunOptions`` or of a model nested in it."""

    key: str
    model: type[BaseModel]
    field: str

    @property
    def info(self) -> FieldInfo:
        return self.model.model_fields[self.field]


def _settings(model: type[BaseModel], prefix: str, own: frozenset[str]) -> Iterator[Setting]:
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        if key in own:
            continue
        nested = nested_model(info)
        if nested is not None:
            yield from _settings(nested, f"{key}.", own)
        else:
            yield Setting(key, model, name)


@dataclass(frozen=True)
class Settable:
    """The keys ``--set`` takes: the fields of ``RunOptions`` (nested ones as
    ``quality.probe_rate``) that have no option of their own on any command."""

    own: dict[str, str]

    @property
    def all(self) -> dict[str, Setting]:
        """Every key: ``RunOptions``' own fields first, then each nested model's."""
        found = list(_settings(RunOptions, "", frozenset(self.own)))
        found.sort(key=lambda s: "." in s.key)  # stable: declaration order within each
        return {s.key: s for s in found}

    def parse(self, text: str) -> tuple[str, object]:
        """``KEY=VALUE`` as (key, checked value).

        Raises:
            argparse.ArgumentTypeError: no ``=``, an unknown key (the message lists the
                valid ones), a key with an option of its own, or a value the field does not
                take.
        """
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
        if key in self.own:
            raise argparse.ArgumentTypeError(f"{key} has an option of its own: {self.own[key]}")
        setting = self.all.get(key)
        if setting is None:
            raise argparse.ArgumentTypeError(
                f"unknown setting {key!r}; the settings are: {', '.join(self.all)}"
            )
        try:
            return key, parse_field(setting.model, setting.field, value.strip())
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"{key}: {err}") from None

    def listing(self, width: int = 92) -> str:
        """Every key with its default and description, for a command's help."""
        lines = textwrap.wrap(
            "settings (--set KEY=VALUE, repeatable; `none` for no value; the same fields as "
            "RunOptions in the Python API):",
            width=width,
        )
        for s in self.all.values():
            head = f"  {s.key}={show(s.info.default)}"
            body = (s.info.description or "").strip()
            lines.extend(
                textwrap.wrap(
                    f"{head}  {body}",
                    width=width,
                    subsequent_indent=" " * 6,
                    break_on_hyphens=False,
                )
            )
        return "\n".join(lines)


def apply_settings(fields: dict[str, object], settings: list[tuple[str, object]] | None) -> None:
    """Put ``--set`` values into ``fields`` (a ``RunOptions`` as a dict), nested by key."""
    for key, value in settings or []:
        *parents, name = key.split(".")
        target = fields
        for parent in parents:
            inner = target.get(parent)
            if not isinstance(inner, dict):
                inner = {}
                target[parent] = inner
            target = inner
        target[name] = value
