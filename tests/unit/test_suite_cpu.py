"""bench/suite_cpu.py: the suite's CPU by kind of process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.suite_cpu import (
    KINDS,
    TICKS,
    Sample,
    descendants,
    kind_of,
    largest,
    parse_stat,
    tally,
)

ROOT = Path(__file__).resolve().parents[2]


def test_each_process_of_the_suite_is_told_apart_by_its_command_line() -> None:
    py = "/work/x/.venv/bin/python"
    cases = {
        ("postgres", ("/opt/pg/bin/postgres", "-D", "/tmp/bb-test-1/pg")): "postgres",
        ("postgres", ("postgres: bb bb_template 127.0.0.1(5555) idle",)): "postgres",
        (
            "temporal",
            ("/x/bin/temporal", "server", "start-dev", "--port", "7233"),
        ): "temporal dev server",
        ("temporal-test-s", ("/x/temporal-test-server", "41234")): "temporal test server",
        ("python", (py, "-m", "blockbatch.simulator", "--port", "1")): "simulator",
        ("python", (py, "/work/x/worker.py")): "worker.py",
        ("python", (py, "starter.py", "run", "doc.md")): "starter.py",
        ("python", (py, "-m", "pytest", "-n", "2")): "pytest",
        ("python", (py, "-c", "import sys;exec(eval(sys.stdin.readline()))")): "pytest",
        ("chromium", ("/usr/lib/chromium/chromium", "--type=renderer")): "chromium",
        ("docker-compose", ("/usr/bin/docker-compose", "config")): "other",
    }
    for (comm, cmdline), kind in cases.items():
        assert kind_of(comm, cmdline) == kind, cmdline
        assert kind in KINDS


def test_a_stat_line_gives_pid_name_state_parent_cpu_and_start() -> None:
    # A name with a space and a parenthesis, as /proc prints it.
    fields = ["S", "41"] + ["0"] * 9 + [str(3 * TICKS), str(TICKS)] + ["0"] * 6 + ["12345"]
    line = "77 (tmux: a) b) " + " ".join(fields) + " 0 0\n"
    assert parse_stat(line) == (77, "tmux: a) b", "S", 41, 4.0, 12345)


def test_the_tree_under_a_process_and_its_cpu_by_kind() -> None:
    def s(pid: int, ppid: int, cpu: float, *cmd: str) -> Sample:
        return Sample(pid, 0, ppid, cpu, Path(cmd[0]).name, cmd)

    procs = {
        p.pid: p
        for p in (
            s(10, 1, 1.0, "/py", "-m", "pytest"),
            s(11, 10, 5.0, "/py", "-c", "exec(eval(sys.stdin.readline()))"),
            s(12, 11, 2.5, "/bin/temporal", "server", "start-dev"),
            s(13, 10, 1.5, "/bin/postgres", "-D", "x"),
            s(14, 13, 0.5, "postgres: checkpointer"),
            s(20, 1, 9.0, "/py", "-m", "pytest"),  # another suite, not under 10
        )
    }
    under = descendants(10, procs)
    assert under == {11, 12, 13, 14}
    table = tally(procs[p] for p in under | {10})
    assert table["pytest"] == {"cpu_s": 6.0, "processes": 2}
    assert table["temporal dev server"] == {"cpu_s": 2.5, "processes": 1}
    assert table["postgres"] == {"cpu_s": 2.0, "processes": 2}
    assert table["other"] == {"cpu_s": 0.0, "processes": 0}
    # The command lines that spent most, their processes together.
    top = largest(procs[p] for p in under | {10})
    assert top[0] == {
        "command": "/py -c exec(eval(sys.stdin.readline()))",
        "kind": "pytest",
        "cpu_s": 5.0,
        "processes": 1,
    }
    assert [row["cpu_s"] for row in top] == [5.0, 2.5, 1.5, 1.0, 0.5]


def test_a_detached_grandchild_is_adopted_and_its_cpu_counted(tmp_path: Path) -> None:
    """What pg_ctl does: the command starts a process in a session of its own and leaves
    before it ends; its CPU is still found, under its own command line."""
    burner = tmp_path / "burner.py"
    burner.write_text(
        "import time\nwhile time.process_time() < 0.3:\n    pass\n",
    )
    parent = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, {str(burner)!r}], start_new_session=True)\n"
    )
    # In a process of its own: the measuring process becomes a child subreaper.
    measuring = (
        "import json, sys\n"
        "from bench.suite_cpu import measure\n"
        f"print(json.dumps(measure([sys.executable, '-c', {parent!r}], every=0.05)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", measuring], cwd=ROOT, capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["exit_code"] == 0
    assert result["left_running"] == []
    kinds = result["kinds"]
    assert isinstance(kinds, dict)
    assert kinds["other"]["processes"] == 2  # the parent and the burner
    assert kinds["other"]["cpu_s"] >= 0.3
    assert float(str(result["counted_cpu_s"])) >= 0.3
