"""Simulated Claude: a local, deterministic server that speaks the Anthropic Messages API."""

from simulator.clock import FakeClock
from simulator.scenario import Scenario

__all__ = ["FakeClock", "Scenario"]
