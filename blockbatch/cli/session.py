"""What one CLI command works with: settings, console, and a lazily opened Blockbatch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from blockbatch.cli.console import Console
from blockbatch.runtime.settings import Settings

if TYPE_CHECKING:
    from temporalio.client import Client

    from blockbatch.api.client import Blockbatch


class Session:
    """Opens Postgres on first use and Temporal only for commands that need it (the API is
    imported then too: a command's ``--help`` loads none of it)."""

    def __init__(self, settings: Settings, con: Console, client: Client | None = None) -> None:
        self.settings = settings
        self.con = con
        self._client = client
        self._bb: Blockbatch | None = None

    async def bb(self, *, temporal: bool = True) -> Blockbatch:
        if self._bb is None:
            from blockbatch.api.client import Blockbatch

            self._bb = await Blockbatch.connect(self.settings, self._client, temporal=temporal)
            self._bb.renders_errors = False  # the console words them for this program
        elif temporal:
            await self._bb.temporal()
        return self._bb

    async def close(self) -> None:
        if self._bb is not None:
            await self._bb.close()
