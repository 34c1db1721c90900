"""Reproducible random decisions and the model misbehaviours they trigger.

Every decision is a hash of (seed, request body hash, how many times that identical body
was seen before, decision name, block_uid): the same scenario replays the same faults
whatever the concurrency, yet a retried identical request gets a fresh draw.

The quality model's wrong answers (``Quality.wrong_*``) are the exception: their dice are
the block's own (seed, block type and content; :func:`block_roll`), since a model that is
wrong about a block in a crowded pack is wrong about it every time it sits there, and the
id a request names a block with (``b3``) says nothing about which block it is. A model
with rates of its own (``Quality.models``) has dice of its own too (the decision names
carry the model's id): two models are wrong about different blocks, so comparing one
model's answers with another's measures both models' errors, as it would with real ones.
Such a model's ``wrong_repeat`` may leave a share of its mistakes to the request's dice
(drawn per call, as a model that samples may be wrong once and right the next time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, UnknownType

from blockbatch.core.agreement import compare_field, compare_properties
from blockbatch.core.evidence import EVIDENCE_KEY
from blockbatch.simulator.content import (
    block_result,
    decoy_value,
    field_value,
    foreign_quote,
    stable_hash,
    wrong_type,
)
from blockbatch.simulator.prompt import Block
from blockbatch.simulator.scenario import Quality, Scenario

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

    def steady(self, decision: str) -> float:
        """A uniform number in [0, 1) for ``decision`` that is the same at every arrival
        of the request (for what the request itself decides, e.g. how long it thinks)."""
        return stable_hash(str(self.seed), self.body_hash, decision) / _SCALE

    def pick(self, count: int, decision: str) -> int:
        """An index in ``range(count)``."""
        return int(self.roll(decision) * count)


def block_roll(seed: int, decision: str, block: Block) -> float:
    """A uniform number in [0, 1) of ``decision`` for ``block``: the same in every request."""
    return stable_hash(str(seed), decision, block.type, block.content) / _SCALE


@dataclass
class Answer:
    """The results the simulated model produced, and the faults it committed.

    ``checked`` holds, for each block answered with its own id and a valid result, its
    position (1-based) and whether the result differs from the block's answer alone
    (:mod:`blockbatch.core.agreement`'s rules): the simulator's true disagreement.
    """

    results: list[dict[str, Any]] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    pack_size: int = 0
    model: str = ""
    checked: list[tuple[int, bool]] = field(default_factory=list)


def answer_blocks(
    blocks: list[Block],
    properties: dict[str, Any],
    scenario: Scenario,
    dice: Dice,
    *,
    strict: bool = False,
    model: str = "",
) -> Answer:
    """One result per block, with the scenario's per-block faults applied.

    ``strict``: structured outputs (contract §2) hold the answer to its schema, so a
    wrongly typed field (``always_malformed``) cannot happen: it is recorded as
    ``always_malformed_suppressed`` and the result stays valid. Faults the schema cannot
    prevent (skipped, duplicated, unknown ids, bleeds, wrong values) still happen.

    ``model``: the request's model, whose own rates (``Quality.models``) apply if it has
    any.
    """
    faults, quality = scenario.faults, scenario.quality
    extra = max(0, len(blocks) - quality.free_blocks) if quality.enabled else 0
    p_skip = min(1.0, faults.skip_block + quality.skip_per_extra_block * extra)
    p_bleed = min(1.0, faults.bleed + quality.bleed_per_extra_block * extra)
    always_skip, skip_contents = set(scenario.always_skip_uids), set(scenario.always_skip_contents)
    always_malformed = set(scenario.always_malformed_uids)
    malformed_contents = set(scenario.always_malformed_contents)
    answer = Answer(pack_size=len(blocks), model=model)
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
            source = Block(
                uid=uid,
                type=block.type,
                content=neighbour.content,
                question=neighbour.question,
                context=neighbour.context,
            )
            answer.faults.append("bleed")
        result = block_result(source, properties)
        wrong = _answer_wrongly(
            blocks, index, result, properties, quality, scenario.seed, model, dice
        )
        if wrong:
            answer.faults.append(wrong)
        quotes = result.get(EVIDENCE_KEY)
        if faults.bad_quote > 0 and isinstance(quotes, dict):
            for name in list(quotes):
                if dice.chance(faults.bad_quote, "bad_quote", f"{uid}\x1f{name}"):
                    quotes[name] = foreign_quote(block.content, f"{uid}\x1f{name}")
                    answer.faults.append("bad_quote")
        valid = True
        if uid in always_malformed or block.content in malformed_contents:
            if strict:
                answer.faults.append("always_malformed_suppressed")
            else:
                _corrupt_one_field(result, properties)
                answer.faults.append("always_malformed")
                valid = False
        if dice.chance(faults.unknown_uid, "unknown_uid", uid):
            result["block_uid"] = f"unknown-{stable_hash(uid, 'unknown') % 10**8:08d}"
            answer.faults.append("unknown_uid")
            valid = False
        if valid:
            altered = source is not block or wrong is not None
            if altered:
                truth = block_result(block, properties)
                fields = {k: v for k, v in properties.items() if k != EVIDENCE_KEY}
                altered = not all(v.agree for v in compare_properties(fields, result, truth))
            answer.checked.append((index + 1, altered))
        answer.results.append(result)
        if dice.chance(faults.duplicate_uid, "duplicate_uid", uid):
            answer.results.append(dict(result))
            answer.faults.append("duplicate_uid")
    return answer


#: Decoy values tried for a wrong field before the next field is tried.
_DECOY_ATTEMPTS = 8


def _answer_wrongly(
    blocks: list[Block],
    index: int,
    result: dict[str, Any],
    properties: dict[str, Any],
    quality: Quality,
    seed: int,
    model: str = "",
    dice: Dice | None = None,
) -> str | None:
    """Make one field of ``result`` plausibly, validly wrong when the block's die says so
    (``Quality.wrong_split``), or, for a model whose mistakes do not all repeat
    (``ModelQuality.wrong_repeat``), when the call's die does; returns the fault
    (``wrong_bleed``, ``wrong_value``) or ``None``. The field, whether it bleeds and the
    wrong value are the die's that said wrong: the block's own (the model's own, when it
    has rates of its own), the same in every call, or the call's."""
    block = blocks[index]
    own_p, call_p = quality.wrong_split(len(blocks), index + 1, model)
    own = f"@{model}" if model in quality.models else ""
    key = (
        f"{seed}\x1f{own}\x1f{block.type}\x1f{block.content}"
        if own
        else (f"{seed}\x1f{block.type}\x1f{block.content}")
    )
    if own_p > 0 and block_roll(seed, f"wrong{own}", block) < own_p:

        def roll(decision: str) -> float:
            return block_roll(seed, f"{decision}{own}", block)

    elif call_p > 0 and dice is not None and dice.chance(call_p, f"wrong{own}", block.uid):

        def roll(decision: str) -> float:
            return dice.roll(f"{decision}{own}", block.uid)

        key = f"{key}\x1f{dice.body_hash}\x1f{dice.occurrence}"
    else:
        return None
    names = [
        n
        for n, s in properties.items()
        if n not in ("block_uid", EVIDENCE_KEY) and isinstance(s, dict)
    ]
    if not names:
        return None
    start = int(roll("wrong_field") * len(names))
    bleed = roll("wrong_bleed") < quality.wrong_bleed_share
    # Alone, a bleed has no neighbour: the wrong value is a decoy.
    neighbour = blocks[index + 1] if index + 1 < len(blocks) else blocks[index - 1]
    bleed = bleed and len(blocks) > 1
    for offset in range(len(names)):
        name = names[(start + offset) % len(names)]
        schema, value = properties[name], result.get(name)
        candidates: list[tuple[str, Any]] = []
        if bleed:
            twin = Block(
                uid=block.uid,
                type=neighbour.type,
                content=neighbour.content,
                question=neighbour.question,
                context=neighbour.context,
            )
            candidates.append(("wrong_bleed", field_value(name, schema, twin)))
        candidates += [
            ("wrong_value", decoy_value(name, schema, value, key, attempt))
            for attempt in range(_DECOY_ATTEMPTS)
        ]
        for fault, candidate in candidates:
            if candidate is None or not _conforms(schema, candidate):
                continue
            if compare_field(name, schema, candidate, value).agree:
                continue
            result[name] = candidate
            return fault
    return None


def _conforms(schema: dict[str, Any], value: Any) -> bool:
    try:
        return bool(Draft202012Validator(schema).is_valid(value))
    except (SchemaError, UnknownType):  # a schema jsonschema cannot read: not offered
        return False


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
