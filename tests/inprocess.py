"""Running one ``starter.py`` command inside the test's own process and event loop.

A command started as ``python starter.py`` costs about 1.5 s of CPU before it does anything
(the interpreter, the Temporal SDK, rich, pydantic); run in-process it costs nothing of the
kind. What the process would have had of its own, each in-process command gets through a
context variable, so commands running at the same time (``asyncio.gather``) keep apart:

- its environment: while any command runs, ``os.environ`` is a mapping that reads and writes
  the command's own environment (the test's ``cli.env``) and, outside a command, the real one;
- its stdout and stderr, captured (as from a pipe: not a terminal), and an empty stdin (as
  from ``/dev/null``);
- its exit code: what :func:`blockbatch.cli.amain` returns. A bug's traceback goes to its
  stderr with code 1, as the interpreter would print it. :func:`blockbatch.cli.run` (the
  process entry, which leaves through ``runtime.process.exit_process`` and :func:`os._exit`)
  is never called: it would end the test session.

What only a real process shows (signals, a closed pipe, a terminal, the console script, the
process's exit status) is tested with ``Cli.start`` / ``Cli.process``.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import os
import sys
import traceback
from collections.abc import Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from blockbatch.cli import amain

_ENV: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "inprocess_env", default=None
)
_STREAMS: contextvars.ContextVar[_Streams | None] = contextvars.ContextVar(
    "inprocess_streams", default=None
)


def _pipe() -> io.TextIOWrapper:
    """A text stream over bytes, like a pipe's end: UTF-8, not a terminal, no fileno."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="", write_through=True)


@dataclass
class _Streams:
    stdout: io.TextIOWrapper
    stderr: io.TextIOWrapper

    @staticmethod
    def text(stream: io.TextIOWrapper) -> str:
        stream.flush()
        buffer = stream.buffer
        assert isinstance(buffer, io.BytesIO)
        return buffer.getvalue().decode("utf-8", errors="replace")


class _RoutedStream:
    """``sys.stdout``/``sys.stderr``/``sys.stdin`` while commands run: the current command's
    stream, else (code outside any command, e.g. pytest's own output) the one it replaced."""

    def __init__(self, name: str, fallback: Any) -> None:
        self._name = name
        self._fallback = fallback

    def _target(self) -> Any:
        if self._name == "stdin":
            # Every in-process command reads an empty stdin (``/dev/null``); so does a
            # thread it starts (threads do not inherit a context).
            return io.StringIO("")
        streams = _STREAMS.get()
        return self._fallback if streams is None else getattr(streams, self._name)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._target(), attr)

    def __iter__(self) -> Iterator[str]:
        return iter(self._target())

    def write(self, text: str) -> int:
        written: int = self._target().write(text)
        return written


class _RoutedEnviron(MutableMapping[str, str]):
    """``os.environ`` while commands run: the current command's environment, else the real one."""

    def __init__(self, real: MutableMapping[str, str]) -> None:
        self.real = real

    def _map(self) -> MutableMapping[str, str]:
        env = _ENV.get()
        return self.real if env is None else env

    def __getitem__(self, key: str) -> str:
        return self._map()[key]

    def __setitem__(self, key: str, value: str) -> None:
        self._map()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._map()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._map()))

    def __len__(self) -> int:
        return len(self._map())

    def copy(self) -> dict[str, str]:
        return dict(self._map())


class _Routing:
    """Installs the routed ``os.environ`` and streams while at least one command runs."""

    def __init__(self) -> None:
        self.active = 0
        self.saved: dict[str, Any] = {}

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if self.active == 0:
            self.saved = {
                "environ": os.environ,
                **{name: getattr(sys, name) for name in ("stdout", "stderr", "stdin")},
            }
            # Replaced, not cleared: the real environment stays as it was (B003's concern).
            os.environ = _RoutedEnviron(self.saved["environ"])  # type: ignore[assignment]  # noqa: B003
            for name in ("stdout", "stderr", "stdin"):
                setattr(sys, name, _RoutedStream(name, self.saved[name]))
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1
            if self.active == 0:
                os.environ = self.saved["environ"]  # noqa: B003 - the real one back
                for name in ("stdout", "stderr", "stdin"):
                    # Unless pytest swapped its capture in meanwhile (it restores its own).
                    if isinstance(getattr(sys, name), _RoutedStream):
                        setattr(sys, name, self.saved[name])
                self.saved = {}


_ROUTING = _Routing()


@dataclass
class Outcome:
    code: int
    out: str
    err: str


async def run_command(argv: Sequence[str], env: dict[str, str]) -> Outcome:
    """``starter.py ARGV`` with environment ``env``, in this event loop: what the process
    would have printed and its exit code."""
    streams = _Streams(_pipe(), _pipe())
    env_token = _ENV.set(dict(env))
    streams_token = _STREAMS.set(streams)
    try:
        with _ROUTING.installed():
            try:
                code = await amain(list(argv))
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
            except Exception:  # noqa: BLE001 - a bug in the command is its output here
                # Uncaught in the process too: the interpreter prints it and exits 1.
                streams.stderr.write(traceback.format_exc())
                code = 1
    finally:
        _STREAMS.reset(streams_token)
        _ENV.reset(env_token)
    return Outcome(code, _Streams.text(streams.stdout), _Streams.text(streams.stderr))
