"""Reproducible random decisions and the model misbehaviours they trigger.

Every decision is a hash of (seed, request body hash, how many times that identical body
was seen before, decision name, block_uid): the same scenario replays the same faults
whatever the concurrency, yet a retried identical request gets a fresh draw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simulator.content import block_result, stable_hash, wrong_type
from simulator.prompt import Block
from simulator.scenario import Scenario

_SCALE = float(2**64)


@dataclass(frozen=True)
class Dice:
    """The random source of one request."""

    seed: int
    body_hash: str
    occurrence: int

    def roll(self, decision: str, uid: str = "") -> float:
        """A uniform number in [0, 1) for ``decision`` (and ``uid``)."""
        key = (str(self.seed), self.body_hash, str(self.occurrence), decision, uid)
        return stable_hash(*key) / _SCALE

    def chance(self, rate: float, decision: str, uid: str = "") -> bool:
        """True with probability ``rate``."""
        return rate > 0 and self.roll(decision, uid) < rate

    def pick(self, count: int, decision: str) -> int:
        """An index in ``range(count)``."""
        return int(self.roll(decision) * count)


@dataclass
class Answer:
    """The results the simulated model produced, and the faults it committed."""

    results: list[dict[str, Any]] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)


def answer_blocks(
    blocks: list[Block], properties: dict[str, Any], scenario: Scenario, dice: Dice
) -> Answer:
    """One result per block, with the scenario's per-block faults applied."""
    faults, quality = scenario.faults, scenario.quality
    extra = max(0, len(blocks) - quality.free_blocks) if quality.enabled else 0
    p_skip = min(1.0, faults.skip_block + quality.skip_per_extra_block * extra)
    p_bleed = min(1.0, faults.bleed + quality.bleed_per_extra_block * extra)
    always_skip, skip_contents = set(scenario.always_skip_uids), set(scenario.always_skip_contents)
    always_malformed = set(scenario.always_malformed_uids)
    malformed_contents = set(scenario.always_malformed_contents)
    answer = Answer()
    for index, block in enumerate(blocks):
        # The id the request names the block with (its block_uid or a short id): echoed.
        uid = block.uid
        if uid in always_skip or block.content in skip_contents:
            answer.faults.append("always_skip")
            continue
        if dice.chance(p_skip, "skip_block", uid):
            answer.faults.append("skip_block")
            continue
        source = block
        if len(blocks) > 1 and dice.chance(p_bleed, "bleed", uid):
            neighbour = blocks[index + 1] if index + 1 < len(blocks) else blocks[index - 1]
            source = Block(uid=uid, type=block.type, content=neighbour.content)
            answer.faults.append("bleed")
        result = block_result(source, properties)
        if uid in always_malformed or block.content in malformed_contents:
            _corrupt_one_field(result, properties)
            answer.faults.append("always_malformed")
        if dice.chance(faults.unknown_uid, "unknown_uid", uid):
            result["block_uid"] = f"unknown-{stable_hash(uid, 'unknown') % 10**8:08d}"
            answer.faults.append("unknown_uid")
        answer.results.append(result)
        if dice.chance(faults.duplicate_uid, "duplicate_uid", uid):
            answer.results.append(dict(result))
            answer.faults.append("duplicate_uid")
    return answer


def _corrupt_one_field(result: dict[str, Any], properties: dict[str, Any]) -> None:
    names = [n for n in properties if n != "block_uid"] or ["block_uid"]
    name = names[0]
    schema = properties.get(name)
    result[name] = wrong_type(schema if isinstance(schema, dict) else {"type": "string"})


def malform(results: list[dict[str, Any]], required: list[str], dice: Dice) -> dict[str, Any]:
    """A tool input that does not match the schema; the variant is picked by hash."""
    variant = dice.pick(3, "malformed_variant")
    if variant == 0 or not results:
        return {"results": "oops"}
    if variant == 1:
        return {"result": results}
    missing = next((n for n in required if n != "block_uid"), "block_uid")
    return {"results": [{k: v for k, v in r.items() if k != missing} for r in results]}
