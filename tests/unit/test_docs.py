"""The README and docs/ say what the code does: generated parts are current, stated defaults
are the code's, links lead somewhere, and the README stays a front door."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from pydantic import BaseModel

from blockbatch.core.planning import LEARNING_PACK_BLOCKS
from blockbatch.core.quality import GATE_MIN_SAMPLES, GATE_SAMPLES_PER_PACK
from blockbatch.core.registry import DEFAULT_MODEL, get_model
from blockbatch.devtools import docs
from blockbatch.runtime.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: Pages whose prose is checked for stated defaults and dated figures. The benchmarks page
#: is where dated figures belong.
PAGES = [
    README,
    *(
        ROOT / "docs" / name
        for name in (
            "how-it-works.md",
            "operations.md",
            "python-api.md",
            "configuration.md",
            "metrics.md",
            "ARCHITECTURE.md",
        )
    ),
]
#: docs/cli.md is generated from `--help` by the CLI's own generator; the README links to it.
GENERATED = re.compile(r"<!-- generated: .*?<!-- end generated: [\w-]+ -->", re.DOTALL)
STATED_DEFAULT = re.compile(r"`([A-Za-z_]+)` \(default `([^`]+)`\)")


def _prose(path: Path) -> str:
    """A page without its generated parts, whitespace collapsed (prose wraps anywhere)."""
    return " ".join(GENERATED.sub("", path.read_text()).split())


# --- generated parts --------------------------------------------------------------------


def test_generated_parts_are_up_to_date() -> None:
    stale = docs.stale()
    assert not stale, f"out of date: {', '.join(stale)}; run `{docs.COMMAND}`"


def test_every_setting_and_option_has_a_meaning() -> None:
    missing = docs.undocumented()
    assert not missing, f"no meaning for {missing}: give the field a description"


def test_every_note_names_a_field_that_exists() -> None:
    assert set(docs.ENV_NOTES) <= set(Settings.model_fields)
    for model, name in docs.OPTION_NOTES:
        assert name in model.model_fields, (model.__name__, name)


def test_a_changed_default_makes_the_page_stale_until_regenerated(tmp_path: Path) -> None:
    for part in docs.PARTS:
        (tmp_path / part.page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / part.page, tmp_path / part.page)
    page = tmp_path / "docs" / "configuration.md"
    page.write_text(page.read_text().replace("default `32`", "default `8`", 1))
    assert docs.stale(tmp_path) == ["docs/configuration.md (run-options)"]
    assert docs.write(tmp_path) == ["docs/configuration.md (run-options)"]
    assert docs.stale(tmp_path) == []
    assert page.read_text() == (ROOT / "docs" / "configuration.md").read_text()


def test_a_page_that_lost_its_markers_is_an_error() -> None:
    with pytest.raises(ValueError, match="has no '<!-- generated: metrics"):
        docs.updated("# Metrics\n", docs.PARTS[0])


def test_the_generated_lists_carry_the_codes_defaults() -> None:
    env = docs.render_environment()
    assert "| `TEMPORAL_TASK_QUEUE` | `blockbatch` |" in env
    assert "| `ANTHROPIC_API_KEY` | unset |" in env
    options = docs.render_run_options()
    assert f"**`model`** (`str`; default `{DEFAULT_MODEL}`)" in options
    assert "**`max_concurrent_packs`** (`int`; default `32`; ≥ 1, ≤ 1000)" in options


def test_a_fields_comment_is_read_from_the_source() -> None:
    class Example(BaseModel):
        #: Two lines
        #: of comment.
        documented: int = 1
        undocumented: int = 2

    assert docs.field_comments(Example) == {"documented": "Two lines of comment."}


# --- defaults the prose states ----------------------------------------------------------


def _code_default(name: str) -> object:
    if name.isupper():
        return Settings.model_fields[name.lower()].get_default(call_default_factory=True)
    owners: list[type[BaseModel]] = [m for m, _ in docs.OPTION_MODELS if name in m.model_fields]
    assert len(owners) == 1, f"`{name}` names no single option field"
    return owners[0].model_fields[name].get_default(call_default_factory=True)


def test_every_default_the_prose_states_is_the_codes() -> None:
    stated = 0
    for page in PAGES:
        for name, value in STATED_DEFAULT.findall(_prose(page)):
            expected = _code_default(name)
            where = f"{page.relative_to(ROOT)}: `{name}` (default `{value}`)"
            if isinstance(expected, bool):
                assert value == str(expected).lower(), where
            elif isinstance(expected, int | float):
                assert float(value.replace(",", "")) == expected, where
            else:
                assert value == str(expected), where
            stated += 1
    assert stated >= 15


def test_the_readme_names_the_default_model() -> None:
    text = README.read_text()
    assert f"| `{DEFAULT_MODEL}` (**default**) |" in text
    assert f"on the default model,\n`{DEFAULT_MODEL}`" in text


def test_the_readme_model_table_states_the_registry_prices() -> None:
    rows = re.findall(
        r"^\| `(claude-[\w-]+)`[^|]*\|[^|]*\| ([\d.]+) / ([\d.]+) \(([\d.]+)\)",
        README.read_text(),
        flags=re.MULTILINE,
    )
    assert len(rows) >= 4
    for model, price_in, price_out, cache_read in rows:
        info = get_model(model)
        assert (float(price_in), float(price_out), float(cache_read)) == (
            info.price_input,
            info.price_output,
            info.price_cache_read,
        ), model


def test_constants_the_prose_states_are_the_codes() -> None:
    how = _prose(ROOT / "docs" / "how-it-works.md")
    assert f"**learning pack** of {LEARNING_PACK_BLOCKS} blocks" in how
    assert f"(at least {GATE_MIN_SAMPLES}, and the upper end" in how
    assert f"samples at least {GATE_SAMPLES_PER_PACK} blocks of every pack" in how


# --- the README as a front door ----------------------------------------------------------


def test_the_readmes_first_commands_are_make_demo_and_make_test() -> None:
    first = re.search(r"```sh\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert first is not None
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert commands == ["make demo", "make test"]


def test_the_readme_reads_in_five_minutes() -> None:
    assert len(README.read_text().splitlines()) <= 300


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_dated_figures_outside_the_benchmarks_page(page: Path) -> None:
    assert not re.findall(r"\b20\d\d-[01]\d-[0-3]\d\b", page.read_text())


# --- links ----------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    headings = {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}
    return headings | set(re.findall(r'<a id="([^"]+)"></a>', text))


def test_slugs_follow_github() -> None:
    assert _slug("Quality: packed answers checked against single ones") == (
        "quality-packed-answers-checked-against-single-ones"
    )
    assert _slug("## `RunOptions`".lstrip("# ")) == "runoptions"


@pytest.mark.parametrize(
    "page", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name
)
def test_relative_links_lead_to_a_file_and_a_heading(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    for link in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), f"{page.name}: {link}"
        if anchor:
            assert anchor in _anchors(path), f"{page.name}: {link}"


def test_the_exit_code_table_is_the_command_lines() -> None:
    from blockbatch.cli import parser

    page = GENERATED.sub("", (ROOT / "docs" / "how-it-works.md").read_text())
    stated = {int(code) for code in re.findall(r"^\| `(\d+)` \|", page, flags=re.MULTILINE)}
    assert stated == {value for name, value in vars(parser).items() if name.startswith("EXIT_")}


def test_the_addresses_the_readme_gives_are_the_defaults() -> None:
    fields = Settings.model_fields
    text = README.read_text()
    assert f"http://localhost:{fields['temporal_ui_port'].default}" in text
    assert f"the simulator at 127.0.0.1:{fields['simulator_port'].default} answered" in text
    makefile = (ROOT / "Makefile").read_text()
    serve_port = re.search(r"^PORT \?= (\d+)$", makefile, flags=re.MULTILINE)
    assert serve_port is not None
    assert f"http://127.0.0.1:{serve_port.group(1)}" in text


def test_the_architecture_map_keeps_its_cells_short() -> None:
    """A map is taken in at a glance: a cell that grows into a paragraph belongs in a module
    docstring or in how-it-works.md."""
    rows = re.findall(r"^\|(.+)\|$", (ROOT / "docs" / "ARCHITECTURE.md").read_text(), re.MULTILINE)
    assert rows
    long = [cell.strip() for row in rows for cell in row.split("|") if len(cell.strip()) > 90]
    assert not long, long
