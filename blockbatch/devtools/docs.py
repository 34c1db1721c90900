"""The parts of docs/ that mirror code, generated from it so they cannot drift.

Four lists are written from their one source:

- ``metrics``: every blockbatch metric, from :data:`blockbatch.runtime.metrics.METRICS`
  (docs/metrics.md);
- ``environment``: every environment variable, from the settings model
  :class:`blockbatch.runtime.settings.Settings` (docs/configuration.md);
- ``run-options``: every run option, from the option models in ``blockbatch.core``
  (``RunOptions``, ``QualityOptions``, ``OutageOptions``, ``BatchOptions``, ``StreamTriggers``;
  docs/configuration.md);
- ``reason-codes``: why a block did not end done, from :data:`blockbatch.core.reasons.REASONS`
  (docs/how-it-works.md).

Each sits in its page between two markers, so the prose around it stays hand-written::

    <!-- generated: metrics (python -m blockbatch.devtools.docs) -->
    ...
    <!-- end generated: metrics -->

``python -m blockbatch.devtools.docs`` rewrites every part; ``--check`` changes nothing and
exits 1 naming each part that is out of date. ``tests/unit/test_docs.py`` runs the check, so CI
fails with the command to run when a metric, a setting or an option changes and its page
does not.

A field's meaning is its ``Field(description=...)`` when it has one, else its ``#:`` comment
in the source (the Sphinx convention the option models use), else the short note below.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from blockbatch.core.batch_types import BatchOptions
from blockbatch.core.escalation_types import EscalationOptions
from blockbatch.core.outage_types import OutageOptions
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.reasons import REASONS
from blockbatch.core.run_types import RunOptions
from blockbatch.core.streams import StreamTriggers
from blockbatch.runtime.metrics import METRICS
from blockbatch.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "python -m blockbatch.devtools.docs"

#: The option models, in the order the page lists them, with the route a user sets them by.
OPTION_MODELS: tuple[tuple[type[BaseModel], str], ...] = (
    (RunOptions, "`RunOptions(...)`; the CLI's options set the common ones"),
    (QualityOptions, "`RunOptions(quality=QualityOptions(...))`"),
    (OutageOptions, "`RunOptions(outage=OutageOptions(...))`"),
    (BatchOptions, '`RunOptions(mode="batch", batch=BatchOptions(...))`'),
    (StreamTriggers, "`Blockbatch.open_stream(...)` and `starter.py stream`"),
    (
        EscalationOptions,
        "`Blockbatch.escalate(run_id, model)`, `starter.py run --escalate-to`, "
        "`starter.py escalate RUN_ID --to`",
    ),
)

#: Meanings of settings whose field carries no description.
ENV_NOTES: dict[str, str] = {
    "blockbatch_data_dir": "the embedded stack's data, logs and pid files",
    "pg_port": "the embedded Postgres's port",
    "pg_database": "the embedded Postgres's database",
    "temporal_address": "the Temporal frontend; unset: the embedded dev server",
    "temporal_namespace": "the Temporal namespace",
    "temporal_port": "the embedded Temporal dev server's port",
    "temporal_ui_port": "the embedded Temporal UI's port",
    "temporal_ui_url": "the base of the Temporal UI links the CLI prints; unset: the embedded UI",
    "temporal_task_queue": "the task queue; workers and starter must agree",
    "anthropic_api_key": "the Claude API key; unset: the local simulator. Never logged, never "
    "in workflow history or the ledger",
    "anthropic_base_url": "another endpoint (a proxy, a simulator elsewhere)",
    "simulator_port": "the embedded simulator's port",
    "anthropic_timeout_s": "per-request timeout, seconds",
    "blockbatch_model_prices": "prices of a model the registry does not price but the Models "
    'API describes, USD per million tokens, as JSON: `{"claude-x": {"input": 1, "output": 5}}`',
    "anthropic_vertex_access_token": "a Google access token for runs on `--provider vertex` "
    "(unset: Application Default Credentials, with `blockbatch[vertex]`); never logged "
    "(docs/providers.md)",
    "blockbatch_foundry_deployments": "Foundry deployment names and the model each serves, as "
    'JSON: `{"team-haiku": "claude-haiku-5-5"}`; unnamed, a deployment is named after its '
    "model (docs/providers.md)",
    "anthropic_google_cloud_access_token": "a Google access token for runs on `--provider "
    "google-cloud` (unset: Application Default Credentials, with `blockbatch[google-cloud]`); "
    "never logged (docs/providers.md)",
    "blockbatch_gateway_base_url": "an OpenAI-compatible gateway's base URL for runs on "
    "`--provider gateway`; calls go to `{base}/chat/completions` (docs/providers.md)",
    "blockbatch_gateway_api_key": "the gateway's key, sent as `Authorization: Bearer`; never "
    "logged (docs/providers.md)",
    "openrouter_api_key": "OpenRouter's key, used on `--provider gateway` when "
    "`BLOCKBATCH_GATEWAY_API_KEY` is unset",
    "worker_max_concurrent_activities": "activities per worker; a call waiting for the rate "
    "limiter holds one, so keep it well above the calls a worker may have waiting",
    "worker_db_pool_size": "Postgres connections per worker; size `max_connections` for "
    "workers x this",
    "worker_max_concurrent_workflow_tasks": "workflow tasks per worker",
    "workflow_task_timeout_s": "seconds before a workflow task a lost worker held, or one "
    "waiting on its sticky queue, goes to another worker (runs started here, and workers)",
    "worker_deployment_name": "with `WORKER_BUILD_ID`: register as one build of this Worker "
    "Deployment (docs/VERSIONING.md)",
    "worker_build_id": "this worker's build id (with `WORKER_DEPLOYMENT_NAME`)",
    "metrics_port": "serve Prometheus metrics on this port (docs/metrics.md); unset: none",
    "metrics_host": "the address the metrics endpoint binds; `0.0.0.0` for another machine",
}

#: Meanings of option fields with neither a description nor a ``#:`` comment.
OPTION_NOTES: dict[tuple[type[BaseModel], str], str] = {
    (RunOptions, "model"): "The model the run calls (a schema's `prompt_config.model` "
    "sets it too); see the README's model table.",
    (RunOptions, "pack_size"): "Blocks per call, fixed (`None`: sized from each block's "
    "tokens, the expected output and the model's limits).",
    (RunOptions, "batching_enabled"): "`False` sends one block per call through the same "
    "path: the baseline.",
    (RunOptions, "estimated_output_per_block"): "Output tokens a block's answer is planned "
    "at (`None`: the schema's estimate, then what the run's answers write).",
    (RunOptions, "max_block_attempts"): "Attempts of a single block before it fails; "
    "halving does not use them up.",
    (RunOptions, "output_budget"): "The most output tokens one pack plans to write.",
    (RunOptions, "safety_margin"): "The share of the context window and output budget a "
    "pack may fill.",
    (RunOptions, "hard_cap"): "The most blocks in one pack, whatever the sizes allow.",
    (RunOptions, "cache_ttl"): "How long the cached prompt prefix lives (batch mode uses `1h`).",
    (OutageOptions, "probe_initial_s"): "First wait before probing a paused run's API.",
    (OutageOptions, "probe_max_s"): "The longest wait between probes (they double up to it).",
    (BatchOptions, "poll_max_s"): "The longest wait between looks at a submitted batch.",
    (BatchOptions, "max_batch_bytes"): "The most bytes of requests in one provider batch "
    "(the API takes 256 MB; the rest is room for the JSON framing).",
}


@dataclass(frozen=True)
class Part:
    """One generated part: its page, its name, and the function that writes it."""

    page: str
    name: str
    render: Callable[[], str]

    @property
    def begin(self) -> str:
        return f"<!-- generated: {self.name} ({COMMAND}) -->"

    @property
    def end(self) -> str:
        return f"<!-- end generated: {self.name} -->"


def _cell(text: str) -> str:
    """Text fit for one Markdown table cell or list item: one line, rst roles as code."""
    text = re.sub(r":\w+:`([^`]+)`", r"`\1`", text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return " ".join(text.split()).replace("|", "\\|")


def _value(value: Any, none: str = "unset") -> str:
    if value is None or value == {}:
        return none
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Path):
        return f"`{value}`"
    if isinstance(value, int | float):
        return f"`{_number(value)}`"
    return f"`{value}`"


def _number(value: object) -> str:
    """A number as the docs write it: thousands grouped from 100,000 up (ports stay plain)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if value >= 100_000 else str(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _default(info: FieldInfo) -> Any:
    return info.get_default(call_default_factory=True)


def _type(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " / ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        parts = [_type(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or `None`" if type(None) in args else "")
    if annotation is SecretStr:
        return "secret"
    if isinstance(annotation, type):
        return f"`{annotation.__name__}`"
    return f"`{annotation}`"


def _bounds(info: FieldInfo) -> str:
    signs = {
        annotated_types.Ge: ("ge", "≥"),
        annotated_types.Gt: ("gt", ">"),
        annotated_types.Le: ("le", "≤"),
        annotated_types.Lt: ("lt", "<"),
    }
    out = []
    for meta in info.metadata:
        for kind, (attr, sign) in signs.items():
            if isinstance(meta, kind):
                out.append(f"{sign} {_number(getattr(meta, attr))}")
    return ", ".join(out)


def field_comments(model: type) -> dict[str, str]:
    """The ``#:`` comment above each annotated field of ``model``'s class body."""
    source = textwrap.dedent(inspect.getsource(model))
    lines = source.splitlines()
    comments: dict[str, str] = {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    for node in body.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above: list[str] = []
            i = node.lineno - 2
            while i >= 0 and lines[i].strip().startswith("#:"):
                above.insert(0, lines[i].strip()[2:].strip())
                i -= 1
            if above:
                comments[node.target.id] = " ".join(above)
    return comments


def field_meaning(model: type[BaseModel], name: str) -> str | None:
    """What a field means, from its description, its ``#:`` comment or :data:`OPTION_NOTES`."""
    info = model.model_fields[name]
    if info.description:
        return info.description
    if model is Settings:
        return ENV_NOTES.get(name)
    return field_comments(model).get(name) or OPTION_NOTES.get((model, name))


def render_metrics() -> str:
    rows = ["| metric | type | labels | counts |", "|---|---|---|---|"]
    for m in METRICS.values():
        labels = ", ".join(f"`{label}`" for label in m.labels) or "none"
        rows.append(f"| `{m.name}` | {m.type} | {labels} | {_cell(m.help)} |")
    return "\n".join(rows)


def render_environment() -> str:
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, info in Settings.model_fields.items():
        meaning = field_meaning(Settings, name) or ""
        rows.append(f"| `{name.upper()}` | {_value(_default(info))} | {_cell(meaning)} |")
    return "\n".join(rows)


def render_run_options() -> str:
    out: list[str] = []
    for model, route in OPTION_MODELS:
        out += [f"### `{model.__name__}`", "", f"Set with {route}.", ""]
        for name, info in model.model_fields.items():
            facts = [_type(info.annotation), f"default {_value(_default(info), '`None`')}"]
            if bounds := _bounds(info):
                facts.append(bounds)
            meaning = _cell(field_meaning(model, name) or "")
            out.append(f"- **`{name}`** ({'; '.join(facts)}): {meaning}")
        out.append("")
    return "\n".join(out).rstrip()


def render_reason_codes() -> str:
    rows = ["| reason code | meaning |", "|---|---|"]
    rows += [f"| `{code}` | {_cell(text)} |" for code, text in REASONS.items()]
    return "\n".join(rows)


PARTS: tuple[Part, ...] = (
    Part("docs/metrics.md", "metrics", render_metrics),
    Part("docs/configuration.md", "environment", render_environment),
    Part("docs/configuration.md", "run-options", render_run_options),
    Part("docs/how-it-works.md", "reason-codes", render_reason_codes),
)


def undocumented() -> list[str]:
    """Settings and option fields whose meaning no source gives."""
    models: list[type[BaseModel]] = [Settings, *(m for m, _ in OPTION_MODELS)]
    return [
        f"{model.__name__}.{name}"
        for model in models
        for name in model.model_fields
        if not field_meaning(model, name)
    ]


def updated(text: str, part: Part) -> str:
    """``text`` with ``part``'s generated section written afresh.

    Raises:
        ValueError: the page lacks the part's markers.
    """
    pattern = re.compile(re.escape(part.begin) + r"\n.*?" + re.escape(part.end), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"{part.page} has no '{part.begin}' ... '{part.end}' markers")
    return pattern.sub(lambda _: f"{part.begin}\n{part.render()}\n{part.end}", text, count=1)


def stale(root: Path = ROOT) -> list[str]:
    """The parts whose page differs from what the code generates, as ``page (name)``."""
    out = []
    for part in PARTS:
        text = (root / part.page).read_text()
        if updated(text, part) != text:
            out.append(f"{part.page} ({part.name})")
    return out


def write(root: Path = ROOT) -> list[str]:
    """Rewrite every stale part; returns what changed."""
    changed = stale(root)
    for part in PARTS:
        path = root / part.page
        path.write_text(updated(path.read_text(), part))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    missing = undocumented()
    if missing:
        print(f"no meaning for: {', '.join(missing)} (add a description)", file=sys.stderr)
        return 1
    if args.check:
        out_of_date = stale()
        for page in out_of_date:
            print(f"out of date: {page}; run `{COMMAND}`", file=sys.stderr)
        return 1 if out_of_date else 0
    for page in write():
        print(f"rewrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
