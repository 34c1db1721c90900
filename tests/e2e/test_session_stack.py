"""The test session's own stack (tests/conftest.py), as the suite starts it."""

from __future__ import annotations

from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from blockbatch.devtools.services import Services
from tests.conftest import TEST_TEMPORAL_OPTIONS


async def test_the_sessions_dev_server_keeps_each_task_queue_in_one_partition(
    services: Services, temporal_env: WorkflowEnvironment
) -> None:
    """Every test opens a task queue of its own: one partition each, not the default four
    (docs/testing.md, "Where the CPU goes"); and a query finds no poller after 5 s, not 20."""
    cmdline = Path(f"/proc/{services.temporal_pid}/cmdline").read_bytes().split(b"\0")
    args = [a.decode() for a in cmdline if a]
    assert "start-dev" in args
    for setting in (
        "matching.numTaskqueueReadPartitions=1",
        "matching.numTaskqueueWritePartitions=1",
        'matching.queryPollerUnavailableWindow="5s"',
    ):
        assert setting in args
        assert args[args.index(setting) - 1] == "--dynamic-config-value"
    assert args[-len(TEST_TEMPORAL_OPTIONS) :] == list(TEST_TEMPORAL_OPTIONS)
    # And the server answers with those settings.
    assert (await temporal_env.client.service_client.check_health()) is True
