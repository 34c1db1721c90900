"""The workflows keep no state in their modules.

The worker runs workflows outside Temporal's sandbox (``WORKFLOW_RUNNER`` in
blockbatch/runtime/temporal.py), which would otherwise import each workflow's module afresh
for every run: without it, a list or dict at module level would be shared by every run a
worker holds, and one run's change would reach the next (and a replay would differ from
the run). So every name a workflow module defines is a module, a class, a function or a
value that cannot change.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import types
from datetime import timedelta

import pytest
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.worker import UnsandboxedWorkflowRunner

import workflows
from blockbatch.runtime.temporal import WORKFLOW_RUNNER

MODULES = sorted(f"workflows.{m.name}" for m in pkgutil.iter_modules(workflows.__path__))
#: Values that cannot change (a RetryPolicy is a dataclass no workflow assigns to).
IMMUTABLE = (str, int, float, bool, bytes, timedelta, frozenset, types.NoneType, RetryPolicy)


def _unchangeable(value: object) -> bool:
    if isinstance(value, tuple):
        return all(_unchangeable(v) for v in value)
    if isinstance(value, types.MappingProxyType):
        return all(_unchangeable(v) for v in value.values())
    return isinstance(value, (*IMMUTABLE, SearchAttributeKey))


def _state(module_name: str) -> dict[str, str]:
    module = importlib.import_module(module_name)
    found = {}
    for name, value in vars(module).items():
        if name.startswith("__") or name == "annotations":  # dunders, `from __future__`
            continue
        if inspect.ismodule(value) or inspect.isclass(value) or callable(value):
            continue
        if not _unchangeable(value):
            found[name] = type(value).__name__
    return found


def test_the_worker_runs_workflows_outside_the_sandbox() -> None:
    assert isinstance(WORKFLOW_RUNNER, UnsandboxedWorkflowRunner)


@pytest.mark.parametrize("module_name", MODULES)
def test_a_workflow_module_holds_nothing_a_run_could_change(module_name: str) -> None:
    assert _state(module_name) == {}


def test_the_check_finds_a_list_a_dict_and_a_set() -> None:
    fake = types.ModuleType("workflows_fake")
    fake.PENDING = []  # type: ignore[attr-defined]
    fake.SEEN = {}  # type: ignore[attr-defined]
    fake.IDS = {1}  # type: ignore[attr-defined]
    fake.OK = (1, "a", timedelta(seconds=1))  # type: ignore[attr-defined]
    fake.HIDDEN = ([],)  # type: ignore[attr-defined]
    sys.modules["workflows_fake"] = fake
    try:
        assert _state("workflows_fake") == {
            "PENDING": "list",
            "SEEN": "dict",
            "IDS": "set",
            "HIDDEN": "tuple",
        }
    finally:
        del sys.modules["workflows_fake"]
