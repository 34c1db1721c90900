"""Turning what a caller hands the API into validated inputs."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

from blockbatch.core.run_types import RunOptions
from blockbatch.core.schema import SchemaSpec, load_schema

SchemaSource = dict[str, Any] | SchemaSpec | str | Path


def as_schema(source: SchemaSource, name: str | None = None) -> SchemaSpec:
    """A validated schema from a dict, a SchemaSpec, JSON text, or a path to a JSON file."""
    if isinstance(source, SchemaSpec):
        return source
    if isinstance(source, str) and source.lstrip().startswith("{"):
        return load_schema(source, name=name)
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(errno.ENOENT, "no such schema file", str(path))
        raw = path.read_bytes()
        return load_schema(raw, name=name or _unnamed(raw, path.stem))
    return load_schema(source, name=name)


def _unnamed(raw: bytes, fallback: str) -> str | None:
    """``fallback`` when the schema JSON names itself neither by "name" nor "title"."""
    try:
        data = json.loads(raw)
    except ValueError:
        return fallback
    return None if isinstance(data, dict) and (data.get("name") or data.get("title")) else fallback


def with_schema_model(options: RunOptions, schema_model: str | None) -> RunOptions:
    """``options.model`` left unset takes the schema's ``prompt_config.model``; a model
    the caller names (``--model``, ``RunOptions(model=...)``) wins, even the default."""
    if "model" not in options.model_fields_set and schema_model:
        return options.model_copy(update={"model": schema_model})
    return options
