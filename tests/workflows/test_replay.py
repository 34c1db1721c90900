"""Recorded histories of real runs (tests/histories/) replay on today's workflow code.

A change to workflows/ that would break runs in flight during a deploy fails here. The
histories are re-recorded with ``python -m tests.histories.record`` (docs/VERSIONING.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from blockbatch.runtime.temporal import WORKFLOWS
from tests.workflows.drifted import DriftedProcessPack
from workflows.run import RunWorkflow

HISTORIES = Path(__file__).resolve().parent.parent / "histories"
#: Recorded history name -> its workflow id (a pack's children derive their ids from it).
IDS: dict[str, str] = json.loads((HISTORIES / "workflow_ids.json").read_text())
RECORDED = [HISTORIES / f"{name}.json" for name in IDS]


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(IDS[path.stem], path.read_text())


def test_every_kind_of_run_is_recorded() -> None:
    assert {p.stem for p in RECORDED} >= {
        "sync_splits.run",
        "sync_splits.pack_split",
        "sync_splits.pack_half",
        "cancelled.run",
        "batch_rounds.run",
        "continue_as_new.first",
        "continue_as_new.last",
        "budget.run",
        "budget.pack",
        "stream.first",
        "stream.last",
        "escalation.run",
        "escalation_continued.first",
        "escalation_continued.last",
    }


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
async def test_recorded_history_replays_on_current_workflows(path: Path) -> None:
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    await replayer.replay_workflow(load(path))


@pytest.mark.parametrize("name", ["sync_splits.pack_split", "sync_splits.pack_half"])
async def test_new_activity_before_call_model_breaks_replay(name: str) -> None:
    replayer = Replayer(
        workflows=[RunWorkflow, DriftedProcessPack], data_converter=pydantic_data_converter
    )
    with pytest.raises(NondeterminismError) as err:
        await replayer.replay_workflow(load(HISTORIES / f"{name}.json"))
    print(err.value)  # shown with -s: what a contributor sees when they break a history
