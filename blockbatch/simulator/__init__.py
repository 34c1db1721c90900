"""Simulated Claude: a local, deterministic server that speaks the Anthropic Messages API."""

from blockbatch.simulator.clock import FakeClock
from blockbatch.simulator.scenario import Scenario

__all__ = ["FakeClock", "Scenario"]
