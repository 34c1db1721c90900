"""A document past the size limit is refused with the limit named, before it is read or
parsed, whatever its format (issue 39: Markdown and text had no limit, and a document far
larger than memory was read and parsed whole)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from blockbatch.api import Blockbatch
from blockbatch.api.errors import parse_checked
from blockbatch.core.blocks import IngestError
from blockbatch.core.convert.limits import MAX_FILE_BYTES
from blockbatch.runtime.settings import Settings

LIMIT = r"above the 200 MiB blockbatch reads; split it"


def test_bytes_past_the_limit_are_refused_before_they_are_parsed() -> None:
    data = b"a" * (MAX_FILE_BYTES + 1)
    with pytest.raises(IngestError, match=LIMIT):
        parse_checked(data, "markdown")


async def test_a_file_past_the_limit_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / "huge.md"
    big.touch()
    os.truncate(big, MAX_FILE_BYTES + 1)  # sparse: no disk used

    def read_bytes(self: Path) -> Any:
        raise AssertionError(f"{self} was read")

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    bb = Blockbatch(None, None, Settings())  # refused before any I/O
    with pytest.raises(IngestError, match=LIMIT):
        await bb.ingest_file(big)
