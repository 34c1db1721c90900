"""The user's schema: the fields to produce for every block, and how to prompt for them.

A schema is a JSON object whose top-level ``properties`` are JSON Schemas, one per field
of the overlay, plus a ``prompt_config``. :func:`load_schema` checks an upload and turns
it into a :class:`SchemaSpec`; every problem it finds is named in one
:class:`SchemaError`, with the field at fault and what to do.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError as JsonSchemaError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from blockbatch.core.evidence import EVIDENCE_KEY
from blockbatch.core.registry import DEFAULT_MODEL, UnknownModelError, get_model

#: The key every result carries to name its block; no field may use it.
RESERVED_FIELD = "block_uid"

#: Top-level keys a schema may have; anything else is most likely a typo.
ALLOWED_TOP_LEVEL_KEYS: tuple[str, ...] = (
    "name",
    "title",
    "description",
    "type",
    "$schema",
    "required",
    "properties",
    "prompt_config",
    "additionalProperties",
)

_JSON_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")

#: Said (run, estimate) of a schema that sets ``prompt_config.temperature``.
TEMPERATURE_NOTICE = (
    "prompt_config.temperature is ignored: the Claude API (version "
    "2026-10-21) no longer takes sampling parameters; remove it from "
    "the schema"
)
#: Keywords a field's schema may use: every keyword the overlay's validation
#: (``Draft202012Validator``) acts on, the annotations of JSON Schema 2020-12, and our own
#: extension (``x-blockbatch-revision``, blockbatch/core/planning.py). Anything else, such as
#: ``"enums"``, is most likely a typo that would silently loosen the field.
FIELD_KEYWORDS: frozenset[str] = frozenset(
    {
        *Draft202012Validator.VALIDATORS,
        "then",
        "else",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$defs",
        "definitions",
        "x-blockbatch-revision",
    }
)
#: Keywords whose value is a schema, a list of schemas, or a map of names to schemas.
_SUBSCHEMA = (
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")

_HINTS = {
    "system_instructions": "write the instructions the model follows for every block",
}


class SchemaError(ValueError):
    """An uploaded schema is unusable; the message names each problem and the fix.

    Attributes:
        problems: one line per problem, each naming the field or path at fault.
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


class PromptConfig(BaseModel):
    """How to prompt the model for this schema."""

    model_config = ConfigDict(extra="forbid")

    system_instructions: str = Field(strict=True)
    per_block_prompt: str = Field(default="", strict=True)
    model: str = Field(default=DEFAULT_MODEL, strict=True)
    #: Accepted from older schemas and never sent: the API version the SDK speaks
    #: (2026-10-21) removed sampling parameters (:data:`TEMPERATURE_NOTICE`).
    temperature: float | None = Field(default=None, ge=0, le=1, strict=True)
    #: The expected output tokens per block; overrides the estimate from the fields.
    max_tokens_per_block: int | None = Field(default=None, ge=1, strict=True)
    #: The most blocks in one call; only ever lowers the computed pack size.
    max_batch_size: int | None = Field(default=None, ge=1, strict=True)
    #: Question mode: each block's text is a question (an instruction to follow for that
    #: block's answer only), not data; the request lays blocks out as questions with their
    #: own contexts (blockbatch/core/prompt.py, blockbatch/core/questions.py). False: blocks are data.
    questions: bool = Field(default=False, strict=True)
    #: Evidence: each result also quotes, per field, the words of its block that support
    #: the value; the quotes are checked against the block and their spans stored
    #: (blockbatch/core/evidence.py). False: values only.
    evidence: bool = Field(default=False, strict=True)

    @field_validator("system_instructions")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("is empty; " + _HINTS["system_instructions"])
        return value

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        try:
            get_model(value)
        except UnknownModelError as exc:
            raise ValueError(str(exc)) from None
        return value


class SchemaSpec(BaseModel):
    """A checked schema: fields, required fields and prompt configuration."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str | None = None
    properties: dict[str, Any]
    required: list[str]
    prompt_config: PromptConfig

    @model_validator(mode="before")
    @classmethod
    def _default_required(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "required" not in data:
            properties = data.get("properties")
            if isinstance(properties, Mapping):
                return {**data, "required": list(properties)}
        return data

    @model_validator(mode="after")
    def _check_fields(self) -> SchemaSpec:
        problems = field_problems(self.properties, self.required)
        problems += evidence_problems(self.properties, self.prompt_config)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def notices(self) -> list[str]:
        """What a user should know of this schema that is no error, one line each."""
        return [TEMPERATURE_NOTICE] if self.prompt_config.temperature is not None else []

    def overlay_json_schema(self) -> dict[str, Any]:
        """The JSON Schema one block's overlay must satisfy (a fresh copy)."""
        return {
            "type": "object",
            "properties": copy.deepcopy(self.properties),
            "required": list(self.required),
            "additionalProperties": False,
        }

    def content_hash(self) -> str:
        """SHA-256 of the canonical JSON of the whole spec, name included.

        Two uploads that mean the same thing (keys and ``required`` in any order, defaults
        spelled out or left out) hash alike, so an upload can be deduplicated.
        """
        data = self.model_dump(mode="json")
        data["required"] = sorted(data["required"])  # a set in JSON Schema's eyes
        if not data["prompt_config"]["questions"]:
            # Added later: left out when off, so schemas stored before hash as they did.
            del data["prompt_config"]["questions"]
        if not data["prompt_config"]["evidence"]:
            del data["prompt_config"]["evidence"]
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def load_schema(source: Mapping[str, Any] | str | bytes, *, name: str | None = None) -> SchemaSpec:
    """Check an uploaded schema and return it as a :class:`SchemaSpec`.

    Args:
        source: the schema as a mapping, or its JSON text (str or UTF-8 bytes).
        name: the schema's name; defaults to the JSON's ``name``, then ``title``, then
            ``"schema"``.

    Raises:
        SchemaError: naming every problem found (bad JSON with line and column, missing
            or empty ``properties``, invalid field schemas, reserved or unknown field
            names, a bad ``prompt_config``, unknown top-level keys).
    """
    data = _as_mapping(source)
    problems: list[str] = []
    unknown = [k for k in data if k not in ALLOWED_TOP_LEVEL_KEYS]
    if unknown:
        problems.append(
            f"unknown top-level key(s) {', '.join(repr(k) for k in unknown)}; allowed: "
            f"{', '.join(ALLOWED_TOP_LEVEL_KEYS)}. Fields belong under 'properties'"
        )
    if "type" in data and data["type"] != "object":
        problems.append(f"'type' must be \"object\" (or left out), got {data['type']!r}")
    resolved = _resolve_name(data, name, problems)
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        problems.append("'description' must be a string")
        description = None

    properties = data.get("properties")
    if properties is None or properties == {}:
        problems.append(
            "'properties' is missing or empty; add at least one field, e.g. "
            '"properties": {"summary": {"type": "string"}}'
        )
        properties = None
    elif not isinstance(properties, Mapping):
        problems.append(
            "'properties' must be an object mapping field names to JSON Schemas, "
            f"got {_json_kind(properties)}"
        )
        properties = None

    required = data.get("required", list(properties or ()))
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        problems.append("'required' must be an array of field names (strings)")
        required = None

    prompt_config = _check_prompt_config(data, problems)
    if properties is not None and required is not None:
        problems.extend(field_problems(properties, required))
    if properties is not None and prompt_config is not None:
        problems.extend(evidence_problems(properties, prompt_config))
    if problems or properties is None or required is None or prompt_config is None:
        raise _schema_error(resolved, problems)

    try:
        return SchemaSpec(
            name=resolved,
            description=description,
            properties=dict(properties),
            required=required,
            prompt_config=prompt_config,
        )
    except ValidationError as exc:  # pragma: no cover - the checks above come first
        raise _schema_error(resolved, [_pydantic_problem(e, "") for e in exc.errors()]) from None


def field_problems(properties: Mapping[str, Any], required: list[str]) -> list[str]:
    """Every problem with the fields and the required list, one readable line each."""
    problems: list[str] = []
    if not properties:
        problems.append("'properties' is empty; add at least one field")
    for field_name, field_schema in properties.items():
        where = f"property {field_name!r}"
        if field_name == RESERVED_FIELD:
            problems.append(
                f"{where} is reserved: every result carries its block's block_uid; rename the field"
            )
        elif not field_name.strip():
            problems.append("a property has an empty name; give every field a name")
        if not isinstance(field_schema, Mapping):
            problems.append(
                f'{where} must be a JSON Schema object such as {{"type": "string"}}, '
                f"got {_json_kind(field_schema)}"
            )
            continue
        problems.extend(_type_problems(where, field_schema))
        problems.extend(_keyword_problems(where, field_schema, ""))
        if _has_ref(field_schema):
            problems.append(f"{where} uses $ref, which is not supported; inline the schema")
    seen: set[str] = set()
    for field_name in required:
        if field_name in seen:
            problems.append(f"'required' lists {field_name!r} twice; list it once")
        seen.add(field_name)
        if field_name not in properties:
            problems.append(
                f"'required' names {field_name!r}, which is not in 'properties'; "
                "add the field or remove it from 'required'"
            )
    if not problems:
        problems.extend(_metaschema_problems(properties, required))
    return problems


def evidence_problems(properties: Mapping[str, Any], config: PromptConfig) -> list[str]:
    """What evidence cannot be asked with: a field of its name, or question mode (an
    answer from general knowledge has no words of its block to quote)."""
    problems = []
    if config.evidence and EVIDENCE_KEY in properties:
        problems.append(
            f"property {EVIDENCE_KEY!r} is reserved when prompt_config.evidence is on: each "
            "result carries its quotes under that name; rename the field"
        )
    if config.evidence and config.questions:
        problems.append(
            "prompt_config.evidence cannot be used with prompt_config.questions: a "
            "question's answer is not quoted from its block; turn one of them off"
        )
    return problems


def _metaschema_problems(properties: Mapping[str, Any], required: list[str]) -> list[str]:
    overlay = {"type": "object", "properties": dict(properties), "required": required}
    problems = []
    for error in Draft202012Validator(Draft202012Validator.META_SCHEMA).iter_errors(overlay):
        path = list(error.path)
        if len(path) >= 2 and path[0] == "properties":
            inner = "/".join(str(p) for p in path[2:])
            at = f" (at {inner})" if inner else ""
            problems.append(f"property {path[1]!r} is not a valid JSON Schema{at}: {error.message}")
        else:
            problems.append(f"the schema is not valid JSON Schema: {error.message}")
    if not problems:
        try:
            Draft202012Validator.check_schema(overlay)
        except JsonSchemaError as exc:  # pragma: no cover - iter_errors found nothing
            problems.append(f"the schema is not valid JSON Schema: {exc.message}")
    return problems


def _type_problems(where: str, field_schema: Mapping[str, Any]) -> list[str]:
    declared = field_schema.get("type")
    types = declared if isinstance(declared, list) else [declared]
    bad = [t for t in types if t is not None and t not in _JSON_TYPES]
    if bad:
        return [f"{where} has unknown type {bad[0]!r}; use one of {', '.join(_JSON_TYPES)}"]
    return []


def _keyword_problems(where: str, node: Mapping[str, Any], at: str) -> list[str]:
    """Unknown keywords in a field's schema and the schemas nested in it, with a guess."""
    problems = []
    for key in node:
        if key in FIELD_KEYWORDS:
            continue
        guess = difflib.get_close_matches(key, sorted(FIELD_KEYWORDS), n=1, cutoff=0.6)
        if not guess:
            lowered = {k.lower(): k for k in FIELD_KEYWORDS}
            guess = [lowered[key.lower()]] if key.lower() in lowered else []
        hint = f" (did you mean {guess[0]!r}?)" if guess else ""
        place = f" at {at}" if at else ""
        problems.append(
            f"{where} has unknown keyword {key!r}{place}{hint}; see "
            "docs/SCHEMAS.md for the keywords a field may use"
        )
    children: list[tuple[str, Any]] = [(key, node.get(key)) for key in _SUBSCHEMA]
    for key in _SUBSCHEMA_LISTS:
        value = node.get(key)
        if isinstance(value, list):
            children.extend((f"{key}/{i}", v) for i, v in enumerate(value))
    for key in _SUBSCHEMA_MAPS:
        value = node.get(key)
        if isinstance(value, Mapping):
            children.extend((f"{key}/{name}", v) for name, v in value.items())
    for path, child in children:
        if isinstance(child, Mapping):
            problems.extend(_keyword_problems(where, child, f"{at}/{path}" if at else path))
    return problems


def _has_ref(node: Any) -> bool:
    if isinstance(node, Mapping):
        return "$ref" in node or any(_has_ref(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_ref(v) for v in node)
    return False


def _as_mapping(source: Mapping[str, Any] | str | bytes) -> Mapping[str, Any]:
    if isinstance(source, Mapping):
        return source
    if isinstance(source, bytes | bytearray):
        try:
            source = bytes(source).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise SchemaError(
                f"the schema file is not valid UTF-8 (byte offset {exc.start}); re-save it as UTF-8"
            ) from None
    if not isinstance(source, str):
        raise SchemaError(f"a schema must be JSON text or an object, got {type(source).__name__}")
    try:
        data = json.loads(source)
    except json.JSONDecodeError as exc:
        raise SchemaError(
            f"the schema is not valid JSON: {exc.msg} at line {exc.lineno}, "
            f"column {exc.colno}; fix the JSON and run again"
        ) from None
    if not isinstance(data, dict):
        raise SchemaError(
            f"the schema must be a JSON object with 'properties' and 'prompt_config', "
            f"got {_json_kind(data)}"
        )
    return data


def _resolve_name(data: Mapping[str, Any], name: str | None, problems: list[str]) -> str:
    if name:
        return name
    for key in ("name", "title"):
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, str) and value.strip():
            return value.strip()
        problems.append(f"{key!r} must be a non-empty string")
    return "schema"


def _check_prompt_config(data: Mapping[str, Any], problems: list[str]) -> PromptConfig | None:
    raw = data.get("prompt_config")
    if raw is None:
        problems.append(
            "'prompt_config' is missing; add "
            '"prompt_config": {"system_instructions": "..."} with the instructions '
            "the model follows for every block"
        )
        return None
    if not isinstance(raw, Mapping):
        problems.append(f"'prompt_config' must be an object, got {_json_kind(raw)}")
        return None
    try:
        return PromptConfig.model_validate(dict(raw))
    except ValidationError as exc:
        problems.extend(_pydantic_problem(e, "prompt_config.") for e in exc.errors())
        return None


def _pydantic_problem(error: Any, prefix: str) -> str:
    loc = prefix + ".".join(str(p) for p in error["loc"])
    kind = error["type"]
    if kind == "missing":
        hint = _HINTS.get(str(error["loc"][-1]), "add it")
        return f"{loc} is missing; {hint}"
    if kind == "extra_forbidden":
        allowed = ", ".join(PromptConfig.model_fields)
        return f"{loc} is not a known key; allowed keys: {allowed}"
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind == "value_error":
        return f"{loc} {message}" if message.startswith("is ") else f"{loc}: {message}"
    return f"{loc}: {message} (got {error['input']!r})"


def _schema_error(name: str, problems: list[str]) -> SchemaError:
    if len(problems) == 1:
        return SchemaError(f"schema {name!r}: {problems[0]}", problems)
    lines = "\n".join(f"  - {p}" for p in problems)
    return SchemaError(f"schema {name!r} has {len(problems)} problems:\n{lines}", problems)


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return "a number" if isinstance(value, int | float) else type(value).__name__


def schema_id_for(spec: SchemaSpec) -> str:
    """The id a schema gets when stored: the same content, the same id."""
    return f"schema-{spec.content_hash()[:12]}"


def schema_fields(definition: Mapping[str, Any]) -> list[str]:
    """A schema definition's fields for columns: the required ones in the order
    ``required`` lists them, then the rest in the order ``properties`` holds them."""
    return list(dict.fromkeys([*definition.get("required", []), *definition["properties"]]))
