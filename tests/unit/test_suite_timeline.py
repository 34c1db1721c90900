"""bench/suite_timeline.py: the per-test timeline plugin and its report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.suite_timeline import busy_by_stretch, per_test, process_cpu

ROOT = Path(__file__).resolve().parents[2]


def _line(ev: str, test: str, t: float, busy: int, total: int, cpu: float = 0.0) -> dict:
    return {"ev": ev, "id": test, "t": t, "busy": busy, "total": total, "cpu": cpu}


def test_each_test_gets_its_wall_its_cpu_and_the_machines_busy_share() -> None:
    lines = [
        _line("start", "a", 0.0, 100, 200, 1.0),
        _line("start", "b", 1.0, 150, 300),  # another worker's test, overlapping
        _line("end", "a", 10.0, 400, 1200, 3.5),
        _line("end", "b", 11.0, 450, 1300),
    ]
    got = {r["test"]: r for r in per_test(lines)}
    assert got["a"] == {"test": "a", "wall_s": 10.0, "own_cpu_s": 2.5, "cpu_s": 2.5, "busy": 0.3}
    assert got["b"]["busy"] == 0.3 and got["b"]["wall_s"] == 10.0


def test_a_tests_cpu_adds_its_subprocesses_and_its_services_while_it_ran() -> None:
    start = _line("start", "a", 0.0, 0, 100, 1.0)
    start.update(children=0.5, temporal=10.0, postgres=4.0, simulator=1.0)
    end = _line("end", "a", 5.0, 50, 200, 2.0)
    end.update(children=1.5, temporal=12.5, postgres=4.5, simulator=1.25)
    # own 1 + subprocesses 1 + dev server 2.5 + Postgres 0.5 + simulator 0.25
    assert per_test([start, end])[0]["cpu_s"] == 5.25


def test_a_service_stopped_in_the_test_is_not_counted_again_as_its_subprocess() -> None:
    # The session's teardown in its last test: the dev server (10 s of CPU by the test's
    # start) and the simulator are stopped and waited for, so they land in `children`.
    start = _line("start", "last", 0.0, 0, 100, 1.0)
    start.update(children=0.5, temporal=10.0, postgres=4.0, simulator=1.0)
    end = _line("end", "last", 5.0, 50, 200, 1.5)
    end.update(children=0.5 + 11.0 + 0.75, postgres=4.5)
    got = per_test([start, end])[0]
    # own 0.5 + subprocesses (11.75 - 11 of services' earlier CPU) + Postgres 0.5
    assert got["cpu_s"] == 1.75


def test_a_processs_cpu_is_read_from_proc_and_a_gone_one_is_none() -> None:
    cpu = process_cpu(os.getpid())
    assert cpu is not None and cpu > 0
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert process_cpu(gone.pid) is None


def test_a_test_without_its_end_is_left_out() -> None:
    assert per_test([_line("start", "a", 0.0, 0, 0)]) == []


def test_busy_share_per_stretch() -> None:
    lines = [
        _line("start", "a", 0.0, 0, 100),
        _line("end", "a", 20.0, 50, 200),
        _line("start", "b", 30.0, 60, 300),
        _line("end", "b", 50.0, 260, 500),
    ]
    assert busy_by_stretch(lines, 30.0) == [(0, 0.5), (30, 1.0)]
    assert busy_by_stretch([], 30.0) == []


def test_the_plugin_writes_a_line_at_each_tests_start_and_end(tmp_path: Path) -> None:
    # A stand-in for the session's `services` fixture: its dev server's pid file names the
    # test process itself, its Postgres and simulator have none.
    (tmp_path / "conftest.py").write_text(
        "import os, pytest\n"
        "class FakeServices:\n"
        "    def __init__(self, root):\n"
        "        self.root = root\n"
        "        self.pg_dir = root / 'pg'\n"
        "    def pid_file(self, name):\n"
        "        return self.root / f'{name}.pid'\n"
        "@pytest.fixture(scope='session')\n"
        "def services(tmp_path_factory):\n"
        "    s = FakeServices(tmp_path_factory.mktemp('services'))\n"
        "    s.pid_file('temporal').write_text(str(os.getpid()))\n"
        "    return s\n"
    )
    (tmp_path / "test_two.py").write_text(
        "def test_one(services):\n    pass\n\ndef test_two():\n    pass\n"
    )
    # Not as an xdist worker's child: PYTEST_XDIST_WORKER would name its file after the worker.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(SUITE_TIMELINE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    command += ["-p", "bench.suite_timeline", "--rootdir", str(tmp_path), str(tmp_path)]
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(x) for x in (tmp_path / "timeline-main.jsonl").read_text().splitlines()]
    assert [(e["ev"], e["id"].rsplit("::", 1)[1]) for e in lines] == [
        ("start", "test_one"),
        ("end", "test_one"),
        ("start", "test_two"),
        ("end", "test_two"),
    ]
    assert [r["test"].rsplit("::", 1)[1] for r in per_test(lines)] == ["test_one", "test_two"]
    # The services are known from the first test that used them: its end and every line after.
    assert ["temporal" in e for e in lines] == [False, True, True, True]
    assert not any("postgres" in e or "simulator" in e for e in lines)
    assert all(e["children"] >= 0 for e in lines)
