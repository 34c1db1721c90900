"""WORKFLOW_TASK_TIMEOUT_S: Temporal's 10 s unless set, and never so short that a busy
worker's own workflow tasks time out and are replayed again and again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from blockbatch.runtime.settings import Settings
from blockbatch.runtime.temporal import STICKY_TIMEOUT


def test_the_workflow_task_timeout_is_temporals_ten_seconds_unless_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WORKFLOW_TASK_TIMEOUT_S", raising=False)
    assert Settings().workflow_task_timeout == timedelta(seconds=10) == STICKY_TIMEOUT
    monkeypatch.setenv("WORKFLOW_TASK_TIMEOUT_S", "3")
    assert Settings().workflow_task_timeout == timedelta(seconds=3)


@pytest.mark.parametrize("value", ["0.5", "0", "121"])
def test_a_workflow_task_timeout_under_a_second_or_over_temporals_cap_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("WORKFLOW_TASK_TIMEOUT_S", value)
    with pytest.raises(ValidationError, match="workflow_task_timeout_s"):
        Settings()
