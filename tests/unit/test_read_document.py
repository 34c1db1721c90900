"""Reading a document file for a run, a quote or a calibration (api/quote.py read_document)."""

from __future__ import annotations

from pathlib import Path

import pytest

from blockbatch.api.quote import read_document
from blockbatch.core.blocks import IngestError
from blockbatch.core.convert.limits import MAX_FILE_BYTES


def test_a_file_over_the_size_limit_is_refused_with_its_limit_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / "corpus.md"
    with big.open("wb") as f:  # sparse: takes no disk, reads as zeros
        f.truncate(MAX_FILE_BYTES + 1)

    def no_read(self: Path) -> bytes:
        raise AssertionError(f"{self} was read")

    monkeypatch.setattr(Path, "read_bytes", no_read)
    with pytest.raises(IngestError) as caught:
        read_document(big)
    message = str(caught.value)
    assert f"above the {MAX_FILE_BYTES // 2**20} MiB blockbatch reads" in message
    assert "split it" in message


def test_a_file_within_the_limit_is_read_with_its_name_and_format(tmp_path: Path) -> None:
    doc = tmp_path / "notes.md"
    doc.write_bytes(b"# Title\n\nA paragraph.\n")
    assert read_document(doc) == (b"# Title\n\nA paragraph.\n", "notes.md", "markdown")
