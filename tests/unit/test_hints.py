"""The next command in a message is written with the program the user invoked
(issue 33 point 11): lower layers write it neutrally (``blockbatch.core.commands``), the CLI
renders it with ``blockbatch`` or ``python <path>/starter.py``, the Python API in its own
words."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import pytest

from blockbatch.api.errors import EmptyRecordsSkipped, parse_checked, speaks_python
from blockbatch.cli import main
from blockbatch.cli.console import Console
from blockbatch.cli.parser import invoked_prog
from blockbatch.core.commands import PROG, option
from blockbatch.store.repo import NotFound


def test_the_program_is_the_one_the_user_typed() -> None:
    assert invoked_prog("/home/ann/.venv/bin/blockbatch") == "blockbatch"
    assert invoked_prog("starter.py") == "python starter.py"
    assert invoked_prog("../blockbatch/starter.py") == "python ../blockbatch/starter.py"
    assert invoked_prog("/opt/my tools/starter.py") == "python '/opt/my tools/starter.py'"


def test_the_console_writes_every_hint_with_the_invoked_program() -> None:
    out, err = io.StringIO(), io.StringIO()
    con = Console(out=out, err=err, prog=invoked_prog("/usr/local/bin/blockbatch"))
    con.error(f"no run 'r-1': list runs with `{PROG} list`", 3)
    con.note(f"note: follow it with `{PROG} watch r-1`")
    con.line(
        con.style(f"confirm: {PROG} confirm r-1", "dim"), f" or {option('text_field', 'body')}"
    )
    con.table(["next"], [[f"{PROG} export r-1"]])
    con.data({"hint": f"{PROG} review r-1"})
    text = out.getvalue() + err.getvalue()
    assert "starter.py" not in text and "{prog}" not in text
    assert "`blockbatch list`" in text and "`blockbatch watch r-1`" in text
    assert "confirm: blockbatch confirm r-1 or --text-field body" in text
    assert "blockbatch export r-1" in text and '"hint": "blockbatch review r-1"' in text


class _Api:
    def __init__(self, renders: bool) -> None:
        self.renders_errors = renders

    async def status(self, run_id: str) -> None:
        raise NotFound(f"no run {run_id!r}: list runs with `{PROG} list`")


async def test_the_python_api_words_hints_for_its_caller_unless_a_front_door_does() -> None:
    api = speaks_python(_Api)
    with pytest.raises(NotFound, match="list runs with `blockbatch list`"):
        await api(True).status("r-1")
    with pytest.raises(NotFound, match=r"`\{prog\} list`"):  # the CLI renders it itself
        await api(False).status("r-1")


def test_the_python_api_lists_the_records_skip_empty_left_out() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        blocks = parse_checked(b"id,text\n1,a\n2,\n3,b\n", "csv", skip_empty=True)
    assert [b.block_content for b in blocks] == ["a", "b"]
    assert [str(w.message) for w in caught if w.category is EmptyRecordsSkipped] == [
        "skipped 1 record with an empty text: line 3"
    ]


# --- the CLI, in process: refusals before anything is stored -------------------------


def _cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], csv: bytes, *args: str
) -> tuple[int, str]:
    rows = tmp_path / "tickets.csv"
    rows.write_bytes(csv)
    schema = tmp_path / "s.json"
    schema.write_text(
        '{"properties": {"topic": {"type": "string"}}, '
        '"prompt_config": {"system_instructions": "Name the topic."}}'
    )
    code = main(["run", str(rows), "--schema", str(schema), *args])
    return code, capsys.readouterr().err


def test_the_cli_names_the_text_field_flag_and_the_long_text_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _cli(
        tmp_path,
        capsys,
        b"ticket_id,body\nT-1,The export button does nothing since the update.\n",
    )
    assert code == 2
    assert "with --text-field," in err and "--text-field body" in err
    assert "text_field" not in err


def test_the_cli_refuses_empty_rows_naming_skip_empty_and_run_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _cli(tmp_path, capsys, b"id,text\n1,hello\n2,\n")
    assert code == 2
    assert "line 3 has an empty 'text'" in err
    assert "--skip-empty" in err and "run again" in err and "upload" not in err


def test_a_stored_message_names_the_console_script() -> None:
    # Stored with a run or a block and read later, in any front door or an export file.
    from blockbatch.core.budget import refusal_text
    from blockbatch.core.claude_errors import classify
    from blockbatch.store.overlays import BUDGET_UNSENT_TEXT

    billing = classify(402, "billing_error", "no credit").describe()
    for text in (BUDGET_UNSENT_TEXT, refusal_text(1.0, recorded=0.9, need=0.2), billing):
        assert "`blockbatch retry RUN_ID" in text and "{prog}" not in text, text
