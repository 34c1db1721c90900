"""Leaving a process that used a Temporal client or worker.

The Temporal SDK's Rust core keeps threads of its own, and one of them may call into Python
while the interpreter finalizes. Now and then the process then aborts ("Fatal Python error:
PyGILState_Release: thread state ... must be current when releasing", SIGABRT) after it
did all its work: temporalio/sdk-python#300, open since 2023. Seen here in CI:
``cancel`` printed "cancel requested" and exited -6. So our commands flush what
they wrote and leave with :func:`os._exit`, which skips the interpreter's finalization (and
with it the abort). Nothing of ours is left to finalization: connections, pools, workers
and child processes are closed by their ``async with`` blocks before this is called.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn


def exit_process(code: int | str | None = 0) -> NoReturn:
    """Exit with ``code`` as :func:`sys.exit` would (a string is printed to stderr and
    exits 1), flushing stdout, stderr and logging first, without finalizing."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
        status = 1
    else:
        status = 0 if code is None else code
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        # A closed pipe (`review RUN | head`) has nothing left to flush into.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)
