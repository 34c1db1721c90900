"""An activity heartbeats often enough for the heartbeat timeout its workflow gave it."""

import dataclasses
from datetime import timedelta

from temporalio.testing import ActivityEnvironment

from activities.shared import heartbeat_every_s


def _every(timeout: timedelta | None) -> float:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timeout)
    return float(env.run(heartbeat_every_s))


def test_a_short_heartbeat_timeout_gets_four_heartbeats_within_it() -> None:
    # The run's call_heartbeat_s at 5 s (the kill tests): a heartbeat every 1.25 s.
    assert _every(timedelta(seconds=5)) == 1.25
    assert _every(timedelta(seconds=2)) == 0.5


def test_a_long_or_no_heartbeat_timeout_heartbeats_every_five_seconds() -> None:
    assert _every(timedelta(seconds=20)) == 5.0
    assert _every(None) == 5.0
