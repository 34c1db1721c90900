"""The tests' wait for an event (tests/waiting.py)."""

from __future__ import annotations

import pytest

from tests.waiting import until


async def test_until_returns_the_first_truthy_value_of_a_plain_or_async_check() -> None:
    seen: list[int] = []

    def plain() -> list[int]:
        seen.append(len(seen))
        return seen if len(seen) == 3 else []

    async def asynchronous() -> str:
        return "ready"

    assert await until(plain, "three calls", interval=0) == [0, 1, 2]
    assert await until(asynchronous, "ready") == "ready"


async def test_until_names_what_never_happened_and_the_last_value_seen() -> None:
    with pytest.raises(AssertionError, match=r"never the row appeared \(last seen: 0\)"):
        await until(lambda: 0, "the row appeared", timeout=0)
