"""The simulator's quality model: wrong like a model in big packs, right alone, and honest
about how often (``/_sim/stats`` quality)."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from blockbatch.core.agreement import compare_properties
from blockbatch.simulator.content import block_result
from blockbatch.simulator.faults import Dice, answer_blocks
from blockbatch.simulator.prompt import Block
from blockbatch.simulator.scenario import ASSUMED_MODEL_QUALITY, ModelQuality, Quality, Scenario
from blockbatch.simulator.server import SimulatorServer
from blockbatch.simulator.testing import DEFAULT_FIELDS, make_blocks, pack_params, tool_input
from tests.simulator.sdk import sdk_client

FIELDS = {
    **DEFAULT_FIELDS,
    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "maxItems": 2},
    "published": {"type": "string", "format": "date"},
}


def blocks(count: int, start: int = 0, ids: str = "uid") -> list[Block]:
    made = make_blocks(count, start=start)
    return [
        Block(
            uid=(b["block_uid"] if ids == "uid" else f"b{i + 1}"),
            type=b["block_type"],
            content=b["block_content"],
        )
        for i, b in enumerate(made)
    ]


def scenario(**quality: float) -> Scenario:
    return Scenario(
        seed=7,
        quality=Quality(
            enabled=True, free_blocks=1, skip_per_extra_block=0, bleed_per_extra_block=0, **quality
        ),
    )


def dice(body: str = "body") -> Dice:
    return Dice(seed=7, body_hash=body, occurrence=0)


def differs(result: dict, block: Block) -> bool:
    truth = block_result(block, FIELDS)
    return not all(v.agree for v in compare_properties(FIELDS, result, truth))


def test_wrong_rate_grows_with_size_and_position_and_is_capped():
    quality = Quality(
        enabled=True,
        free_blocks=5,
        wrong_base=0.01,
        wrong_per_extra_block=0.002,
        wrong_per_position=0.001,
        wrong_max=0.2,
    )
    assert quality.wrong_rate(1, 1) == 0.0
    assert quality.wrong_rate(5, 1) == 0.01
    assert quality.wrong_rate(25, 1) == 0.01 + 0.002 * 20
    assert quality.wrong_rate(25, 11) == 0.01 + 0.002 * 20 + 0.001 * 10
    assert quality.wrong_rate(200, 150) == 0.2
    assert Quality(wrong_base=1.0).wrong_rate(50, 50) == 0.0  # not enabled


def test_a_call_of_one_block_is_always_right():
    block = blocks(1)
    answer = answer_blocks(block, FIELDS, scenario(wrong_base=1.0), dice())
    assert answer.results == [block_result(block[0], FIELDS)]
    assert answer.checked == [(1, False)]


def test_wrong_answers_validate_and_disagree_some_by_bleeding_from_a_neighbour():
    pack = blocks(40)
    answer = answer_blocks(pack, FIELDS, scenario(wrong_base=1.0), dice())
    validator = Draft202012Validator(
        {"type": "object", "properties": FIELDS, "required": list(FIELDS)}
    )
    assert all(validator.is_valid(r) for r in answer.results)
    assert all(differs(r, b) for r, b in zip(answer.results, pack, strict=True))
    assert answer.checked == [(i + 1, True) for i in range(40)]
    assert {"wrong_bleed", "wrong_value"} <= set(answer.faults)
    # a bled field holds the neighbour's true value
    truths = [block_result(b, FIELDS) for b in pack]
    bled = 0
    for i, result in enumerate(answer.results[:-1]):
        changed = [k for k in FIELDS if result[k] != truths[i][k]]
        assert len(changed) == 1
        if result[changed[0]] == truths[i + 1][changed[0]]:
            bled += 1
    assert bled > 5


def test_the_verdict_is_the_blocks_own_whatever_the_ids_and_the_other_blocks():
    quality = scenario(wrong_base=0.3)
    by_uid = answer_blocks(blocks(10), FIELDS, quality, dice("one"))
    short = answer_blocks(blocks(10, ids="short"), FIELDS, quality, dice("two"))
    mixed = blocks(10)
    mixed[5:] = blocks(5, start=100)  # other neighbours after position 5
    other = answer_blocks(mixed, FIELDS, quality, dice("three"))
    assert [c for _, c in by_uid.checked] == [c for _, c in short.checked]
    assert [c for _, c in by_uid.checked][:4] == [c for _, c in other.checked][:4]
    assert any(c for _, c in by_uid.checked) and not all(c for _, c in by_uid.checked)
    strip = [{k: v for k, v in r.items() if k != "block_uid"} for r in by_uid.results]
    assert strip == [{k: v for k, v in r.items() if k != "block_uid"} for r in short.results]


def test_bigger_packs_and_later_positions_are_wrong_more_often():
    quality = scenario(wrong_per_extra_block=0.004, wrong_per_position=0.004)
    many = blocks(400)

    def altered(size: int) -> list[tuple[int, bool]]:
        out = []
        for start in range(0, len(many), size):
            out += answer_blocks(many[start : start + size], FIELDS, quality, dice()).checked
        return out

    def share(checked: list[tuple[int, bool]]) -> float:
        return sum(c for _, c in checked) / len(checked)

    small, big = altered(5), altered(50)
    assert share(small) < 0.06 < share(big)
    assert share([c for c in big if c[0] <= 10]) < share([c for c in big if c[0] > 40])


def test_off_by_default_every_answer_is_the_single_answer():
    pack = blocks(60)
    answer = answer_blocks(pack, FIELDS, Scenario(), dice())
    assert answer.results == [block_result(b, FIELDS) for b in pack]
    assert not any(c for _, c in answer.checked) and not answer.faults


async def test_stats_report_the_true_disagreement_per_pack_size():
    async with SimulatorServer(
        scenario=Scenario(
            seed=3,
            quality=Quality(
                enabled=True,
                free_blocks=1,
                skip_per_extra_block=0,
                bleed_per_extra_block=0,
                wrong_per_extra_block=0.01,
            ),
        )
    ) as sim:
        client = sdk_client(sim.base_url)
        altered_seen = 0
        for start in range(0, 60, 20):
            message = await client.messages.create(**pack_params(make_blocks(20, start=start)))
            truth = {
                b["block_uid"]: block_result(
                    Block(b["block_uid"], b["block_type"], b["block_content"]), DEFAULT_FIELDS
                )
                for b in make_blocks(20, start=start)
            }
            altered_seen += sum(r != truth[r["block_uid"]] for r in tool_input(message)["results"])
        await client.messages.create(**pack_params(make_blocks(1)))
        quality = sim.state.stats.snapshot()["quality"]
        assert quality["by_pack_size"]["20"] == {"answered": 60, "altered": altered_seen}
        assert quality["by_pack_size"]["1"] == {"answered": 1, "altered": 0}
        assert (quality["answered"], quality["altered"]) == (61, altered_seen)
        assert altered_seen > 0
        assert sum(p["answered"] for p in quality["by_position"].values()) == 61


def models_scenario(**models: ModelQuality) -> Scenario:
    return Scenario(
        seed=7,
        quality=Quality(
            enabled=True, skip_per_extra_block=0, bleed_per_extra_block=0, models=models
        ),
    )


def test_a_models_own_rates_apply_alone_too_and_grow_with_the_pack():
    own = ModelQuality(
        wrong_alone=0.01, wrong_base=0.01, wrong_per_extra_block=0.005, wrong_per_position=0.001
    )
    quality = Quality(enabled=True, free_blocks=20, wrong_base=0.5, models={"cheap": own})
    assert quality.wrong_rate(1, 1, "cheap") == 0.01
    assert quality.wrong_rate(10, 1, "cheap") == 0.02
    assert quality.wrong_rate(30, 5, "cheap") == pytest.approx(0.01 + 0.01 + 0.005 * 10 + 0.001 * 4)
    # a model without rates of its own keeps the shared ones, and is right alone
    assert quality.wrong_rate(1, 1, "other") == 0.0
    assert quality.wrong_rate(10, 1, "other") == 0.5
    assert Quality(models={"cheap": own}).wrong_rate(1, 1, "cheap") == 0.0  # not enabled


def test_a_model_with_rates_of_its_own_can_be_wrong_alone_validly():
    quality = models_scenario(cheap=ModelQuality(wrong_alone=1.0))
    validator = Draft202012Validator(
        {"type": "object", "properties": FIELDS, "required": list(FIELDS)}
    )
    for block in blocks(20):
        wrong = answer_blocks([block], FIELDS, quality, dice(), model="cheap")
        assert wrong.checked == [(1, True)] and wrong.model == "cheap"
        assert validator.is_valid(wrong.results[0]) and differs(wrong.results[0], block)
        truth = block_result(block, FIELDS)
        assert sum(wrong.results[0][k] != truth[k] for k in FIELDS) == 1
        right = answer_blocks([block], FIELDS, quality, dice(), model="strong")
        assert right.results == [truth] and right.checked == [(1, False)]


def test_each_model_is_wrong_about_blocks_of_its_own_every_time():
    rates = ModelQuality(wrong_alone=0.3)
    quality = models_scenario(one=rates, two=rates)
    many = blocks(200)

    def wrong_set(model: str, body: str) -> set[int]:
        checked = [
            answer_blocks([b], FIELDS, quality, dice(body), model=model).checked[0][1] for b in many
        ]
        return {i for i, c in enumerate(checked) if c}

    one = wrong_set("one", "a")
    assert one == wrong_set("one", "b")  # the block's die, not the request's
    two = wrong_set("two", "a")
    assert 40 < len(one) < 80 and 40 < len(two) < 80
    assert one != two and len(one & two) < min(len(one), len(two)) * 0.6


def test_mistakes_that_do_not_repeat_are_drawn_per_call_at_the_same_rate():
    many = blocks(2000)

    def wrong_set(rates: ModelQuality, body: str) -> set[int]:
        quality = models_scenario(cheap=rates)
        checked = [
            answer_blocks([b], FIELDS, quality, dice(body), model="cheap").checked[0][1]
            for b in many
        ]
        return {i for i, c in enumerate(checked) if c}

    always = ModelQuality(wrong_alone=0.2)
    half = ModelQuality(wrong_alone=0.2, wrong_repeat=0.5)
    never = ModelQuality(wrong_alone=0.2, wrong_repeat=0.0)
    assert always.split(0.2) == (0.2, 0.0)
    own, per_call = half.split(0.2)
    assert own == pytest.approx(0.1) and own + (1 - own) * per_call == pytest.approx(0.2)
    # the same rate in all, whatever repeats
    for rates in (always, half, never):
        assert 340 < len(wrong_set(rates, "a")) < 460
    # repeat=1: the block's die (the same calls); repeat=0: two calls share ~ p^2
    assert wrong_set(always, "a") == wrong_set(always, "b")
    a, b = wrong_set(never, "a"), wrong_set(never, "b")
    assert len(a & b) < 0.35 * len(a)
    # half: the repeating share is in both calls, and the block's own (rate 1's die)
    a, b = wrong_set(half, "a"), wrong_set(half, "b")
    assert 0.4 * len(a) < len(a & b) < 0.75 * len(a)
    assert len(a & b) <= len(a & wrong_set(always, "a")) + 60
    # a mistake drawn per call is still valid, one field, and disagrees
    quality = models_scenario(cheap=ModelQuality(wrong_alone=1.0, wrong_repeat=0.0))
    validator = Draft202012Validator(
        {"type": "object", "properties": FIELDS, "required": list(FIELDS)}
    )
    for block in many[:20]:
        wrong = answer_blocks([block], FIELDS, quality, dice(), model="cheap")
        assert wrong.checked == [(1, True)] and validator.is_valid(wrong.results[0])
        truth = block_result(block, FIELDS)
        assert sum(wrong.results[0][k] != truth[k] for k in FIELDS) == 1


def test_assumed_rates_make_the_cheap_model_worse_and_worse_in_big_packs():
    quality = Scenario(
        seed=7,
        quality=Quality(
            enabled=True,
            skip_per_extra_block=0,
            bleed_per_extra_block=0,
            models=ASSUMED_MODEL_QUALITY,
        ),
    )
    many = blocks(800)

    def share(model: str, size: int) -> float:
        checked = []
        for start in range(0, len(many), size):
            pack = many[start : start + size]
            checked += answer_blocks(pack, FIELDS, quality, dice(), model=model).checked
        return sum(c for _, c in checked) / len(checked)

    haiku, sonnet = "claude-haiku-5-5", "claude-sonnet-5-5"
    assert share(sonnet, 1) < 0.01 and share(sonnet, 40) < 0.03
    assert share(haiku, 1) < 0.03 and share(haiku, 20) < 0.05
    assert share(haiku, 40) > 0.08 > share(sonnet, 40)


async def test_stats_report_the_true_disagreement_per_model():
    async with SimulatorServer(
        scenario=models_scenario(**{"claude-haiku-5-5": ModelQuality(wrong_alone=0.5)})
    ) as sim:
        client = sdk_client(sim.base_url)
        altered_seen = 0
        for block in make_blocks(30):
            message = await client.messages.create(**pack_params([block], model="claude-haiku-5-5"))
            truth = block_result(
                Block(block["block_uid"], block["block_type"], block["block_content"]),
                DEFAULT_FIELDS,
            )
            altered_seen += tool_input(message)["results"] != [truth]
        await client.messages.create(**pack_params(make_blocks(10)))  # claude-sonnet-4-6
        by_model = sim.state.stats.snapshot()["quality"]["by_model"]
        assert by_model["claude-haiku-5-5"] == {"answered": 30, "altered": altered_seen}
        assert by_model["claude-sonnet-4-6"] == {"answered": 10, "altered": 0}
        assert 5 < altered_seen < 25
