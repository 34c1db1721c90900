"""Start and follow blockbatch runs from the command line: `python starter.py --help`.

Only starts and follows; the commands live in ``blockbatch/cli/`` and use the same
``Blockbatch`` API as any program. ``main(argv, client)`` lets tests run it in-process.
"""

from __future__ import annotations

from blockbatch.cli import amain, main, run

__all__ = ["amain", "main"]

if __name__ == "__main__":
    run()
