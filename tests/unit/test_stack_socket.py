"""Postgres' Unix socket fits a socket path however deep the stack's data dir is."""

from __future__ import annotations

from pathlib import Path

from blockbatch.devtools.stack import _socket_dir


def test_a_short_data_dir_keeps_its_socket() -> None:
    assert _socket_dir(Path("/tmp/bb-test-x/pg"), 25472) == Path("/tmp/bb-test-x/pg")


def test_a_data_dir_too_deep_for_a_socket_path_puts_it_in_tmp() -> None:
    # The CI failure: pytest's tmp_path as TMPDIR made the path 140 bytes, over sun_path's 107.
    deep = Path("/tmp/pytest-of-root/pytest-263/popen-gw1/test_ctrl_c_on_the_scale_bench0")
    pg = deep / "bb-bench-scale-y_5osx9y" / "pg"
    assert len(str(pg / ".s.PGSQL.25472")) > 107
    assert _socket_dir(pg, 25472) == Path("/tmp")
