"""starter.py calibrate on the real stack, with the simulator wrong like a model in big packs.

The commands run in-process (``amain``), as the CLI would run them, to keep the test short.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blockbatch.cli import amain
from blockbatch.cli.calibrate import print_calibration, print_model_calibration
from blockbatch.cli.console import Console
from blockbatch.core.calibration import Calibration, ModelCalibration
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc

#: Right in packs of up to 4 blocks; in a pack of 16, each block is wrong with p = 0.72.
QUALITY = {
    "enabled": True,
    "free_blocks": 4,
    "skip_per_extra_block": 0,
    "bleed_per_extra_block": 0,
    "wrong_per_extra_block": 0.06,
}
TARGET = 0.9
#: The escalation test's target. Haiku's plain packs of 5 agree on 26 of the 30 samples, one
#: block under 0.9, and the calibration's answers are not the same from run to run (three
#: runs alone sent 19, 19 and 13 blocks up at size 10): a `make test` beside a CPU hog saw 27
#: of 30 at size 5 and a recommendation. At 0.95 three blocks would have to turn.
ESCALATION_TARGET = 0.95


async def cli(s: Stack, capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = await amain(list(argv), client=s.client, settings=s.settings)
    out, err = capsys.readouterr()
    return code, out, err


async def test_calibrate_recommends_the_largest_size_that_truly_meets_the_target(
    bbstack: Stack, capsys: Any, tmp_path: Path
) -> None:
    doc_path, schema_path = tmp_path / "doc.md", tmp_path / "schema.json"
    doc_path.write_bytes(markdown_doc(40))
    schema_path.write_text(json.dumps(extract_schema(instruction_words=200)))
    doc, schema = str(doc_path), str(schema_path)
    # Bad input: a clear error, exit 2, nothing stored or started.
    for args, words in (
        (("--sizes", "1,8"), "2 or more"),
        (("--sizes", "4,x"), "whole numbers"),
        (("--sample", "41"), "more than the document's 40 blocks"),
        (("--sample", "8", "--sizes", "4,16"), "larger than the sample"),
        (("--target", "1.5"), "--target must be a fraction in (0, 1]"),
        (("--model", "claude-nonesuch"), "claude-nonesuch"),
    ):
        code, _, err = await cli(bbstack, capsys, "calibrate", doc, "--schema", schema, *args)
        assert code == 2 and words in err, (args, err)
    assert await bbstack.pool.fetchval("select count(*) from documents") == 0
    assert await bbstack.pool.fetchval("select count(*) from runs") == 0

    bbstack.sim.scenario(seed=5, quality=QUALITY)
    async with bbstack.worker():
        code, out, err = await cli(
            bbstack,
            capsys,
            "calibrate",
            doc,
            "--schema",
            schema,
            "--sample",
            "16",
            "--sizes",
            "4,16",
            "--target",
            str(TARGET),
            "--json",
        )
    assert code == 0, err
    c = json.loads(out)
    true = bbstack.sim.stats()["quality"]["by_pack_size"]
    sizes = {r["size"]: r for r in c["sizes"]}
    assert list(sizes) == [1, 4, 16]
    # What calibrate measured is what the simulator did: every disagreement it injected.
    for size in (4, 16):
        assert true[str(size)]["answered"] == 16 == sizes[size]["compared"]
        assert sizes[size]["agreed"] == 16 - true[str(size)]["altered"]
        assert sizes[size]["ci_low"] <= sizes[size]["rate"] <= sizes[size]["ci_high"]
    truly_meets = [
        s for s in (4, 16) if 1 - true[str(s)]["altered"] / true[str(s)]["answered"] >= TARGET
    ]
    assert truly_meets == [4] and c["recommended"] == 4
    # Every call was real and is in the ledger: 16 alone, 4 packs of 4, 1 of 16 (+ warm-ups).
    for size, packs in ((1, 16), (4, 4), (16, 1)):
        calls = await bbstack.pool.fetchval(
            "select count(*) from llm_calls where run_id = $1 and purpose = 'pack'",
            sizes[size]["run_id"],
        )
        assert calls == packs, (size, calls)
    assert c["cost_at_recommended_usd"] > 0 and c["cost_usd"] > 0
    # The packed runs' answers are not reused by a later run; the alone answers are.
    keys = await bbstack.pool.fetch(
        "select run_id, count(answer_key) as n from overlays group by run_id"
    )
    assert {r["run_id"]: r["n"] for r in keys} == {
        sizes[1]["run_id"]: 16,
        sizes[4]["run_id"]: 0,
        sizes[16]["run_id"]: 0,
    }

    code, out, err = await cli(bbstack, capsys, "estimate", doc, "--schema", schema)
    assert code == 0, err
    assert f"calibrated: size 4 meets 90.0% (calibration {c['calibration_id']} of " in out, out

    # The table a person reads, from the same calibration.
    print_calibration(Console(), Calibration.model_validate(c))
    table = capsys.readouterr().out
    for text in (
        "SIZE",
        "alone (baseline)",
        "4 *",
        "100.0% of 16",
        "recommended pack size: 4",
        "whole document (sync):",
        sizes[16]["run_id"],
    ):
        assert text in table, (text, table)


#: The cheap model is right in packs of up to 4 blocks and wrong about most blocks in a
#: pack of 16; the strong one is never wrong (rates of their own, on their own dice).
MODELS_QUALITY = {
    "enabled": True,
    "free_blocks": 4,
    "skip_per_extra_block": 0,
    "bleed_per_extra_block": 0,
    "models": {
        "claude-haiku-5-5": {"wrong_per_extra_block": 0.06},
        "claude-sonnet-5-5": {},
    },
}
HAIKU, SONNET = "claude-haiku-5-5", "claude-sonnet-5-5"


async def test_calibrate_across_models_picks_the_cheapest_pair_that_meets_the_target(
    bbstack: Stack, capsys: Any, tmp_path: Path
) -> None:
    doc_path, schema_path = tmp_path / "doc.md", tmp_path / "schema.json"
    doc_path.write_bytes(markdown_doc(40))
    schema_path.write_text(json.dumps(extract_schema(instruction_words=200)))
    doc, schema = str(doc_path), str(schema_path)
    code, _, err = await cli(
        bbstack, capsys, "calibrate", doc, "--schema", schema, "--reference", SONNET
    )
    assert code == 2 and "--reference needs --models" in err, err

    bbstack.sim.scenario(seed=5, quality=MODELS_QUALITY)
    async with bbstack.worker():
        code, out, err = await cli(
            bbstack,
            capsys,
            "calibrate",
            doc,
            "--schema",
            schema,
            "--models",
            f"{HAIKU},{SONNET}",
            "--sample",
            "16",
            "--sizes",
            "4,16",
            "--target",
            str(TARGET),
            "--json",
        )
    assert code == 0, err
    m = json.loads(out)
    # the reference defaults to the priciest model; its alone run is the only size 1
    assert m["reference_model"] == SONNET
    by_model = {c["model"]: c for c in m["calibrations"]}
    assert list(by_model) == [HAIKU, SONNET]
    assert by_model[HAIKU]["sizes"][0]["run_id"] == by_model[SONNET]["sizes"][0]["run_id"]
    assert (by_model[HAIKU]["recommended"], by_model[SONNET]["recommended"]) == (4, 16)
    haiku = {r["size"]: r for r in by_model[HAIKU]["sizes"]}
    assert haiku[4]["rate"] == 1.0 and haiku[16]["rate"] < TARGET
    # every pair quoted on the whole document; the cheap model at 4 is the cheapest that meets
    assert all(r["whole_cost_usd"] > 0 for c in by_model.values() for r in c["sizes"])
    assert haiku[4]["whole_cost_usd"] < by_model[SONNET]["sizes"][2]["whole_cost_usd"]
    assert (m["choice"]["model"], m["choice"]["size"]) == (HAIKU, 4)
    # each run ran on its model, and the simulator saw what calibrate measured
    models = await bbstack.pool.fetch(
        "select run_id, array_agg(distinct model) as models from llm_calls group by run_id"
    )
    ran_on = {r["run_id"]: r["models"] for r in models}
    assert ran_on[haiku[4]["run_id"]] == [HAIKU] and ran_on[haiku[16]["run_id"]] == [HAIKU]
    assert ran_on[by_model[SONNET]["sizes"][0]["run_id"]] == [SONNET]
    true = bbstack.sim.stats()["quality"]["by_model"]
    assert true[SONNET]["altered"] == 0
    assert true[HAIKU]["altered"] == 16 - haiku[16]["agreed"]
    # stored once per model; a quote on each model names its calibration
    rows = await bbstack.pool.fetch("select calibration_id, model from calibrations")
    assert {r["calibration_id"]: r["model"] for r in rows} == {
        f"{m['calibration_id']}:{HAIKU}": HAIKU,
        f"{m['calibration_id']}:{SONNET}": SONNET,
    }
    code, out, err = await cli(
        bbstack, capsys, "estimate", doc, "--schema", schema, "--model", HAIKU
    )
    assert code == 0, err
    assert (
        f"calibrated: size 4 meets 90.0% against {SONNET} alone "
        f"(calibration {m['calibration_id']}:{HAIKU} of "
    ) in out, out

    print_model_calibration(Console(), ModelCalibration.model_validate(m))
    table = capsys.readouterr().out
    for text in (
        "MODEL",
        "WHOLE DOC",
        "alone (baseline)",
        "4 *",
        f"recommended: {HAIKU} at pack size 4",
    ):
        assert text in table, (text, table)


#: Haiku wrong about 15% of blocks in any pack and more beyond 4, each call drawing afresh
#: (``wrong_repeat`` 0): it misses the target at every size, but two packings rarely agree
#: on a mistake, so escalated to Sonnet it meets it.
ESCALATION_QUALITY = {
    **MODELS_QUALITY,
    "models": {
        HAIKU: {"wrong_base": 0.15, "wrong_per_extra_block": 0.025, "wrong_repeat": 0.0},
        SONNET: {},
    },
}


async def test_calibrate_with_escalation_measures_the_cheap_model_escalated_to_the_reference(
    bbstack: Stack, capsys: Any, tmp_path: Path
) -> None:
    doc_path, schema_path = tmp_path / "doc.md", tmp_path / "schema.json"
    doc_path.write_bytes(markdown_doc(60))
    schema_path.write_text(json.dumps(extract_schema(instruction_words=200)))
    doc, schema = str(doc_path), str(schema_path)
    code, _, err = await cli(
        bbstack, capsys, "calibrate", doc, "--schema", schema, "--models", SONNET, "--escalation"
    )
    assert code == 2 and "--escalation needs --models with a model other than" in err, err

    # a quote of the escalation before anything measured it: its price per percent
    code, out, err = await cli(
        bbstack,
        capsys,
        "estimate",
        doc,
        "--schema",
        schema,
        "--model",
        HAIKU,
        "--escalate-to",
        SONNET,
        "--json",
    )
    assert code == 0, err
    before = json.loads(out)["escalation"]
    assert before["to"] == SONNET and before["share"] is None and before["alone_usd"] > 0
    code, out, err = await cli(
        bbstack,
        capsys,
        "estimate",
        doc,
        "--schema",
        schema,
        "--model",
        HAIKU,
        "--escalate-to",
        HAIKU,
    )
    assert code == 2 and "is the run's own model" in err, err

    bbstack.sim.scenario(seed=3, quality=ESCALATION_QUALITY)
    async with bbstack.worker():
        code, out, err = await cli(
            bbstack,
            capsys,
            "calibrate",
            doc,
            "--schema",
            schema,
            "--models",
            f"{HAIKU},{SONNET}",
            "--sample",
            "30",
            "--sizes",
            "5,10",
            "--target",
            str(ESCALATION_TARGET),
            "--escalation",
            "--json",
        )
    assert code == 0, err
    m = json.loads(out)
    by_model = {c["model"]: c for c in m["calibrations"]}
    haiku, sonnet = by_model[HAIKU], by_model[SONNET]
    assert sonnet["escalation"] == []  # the reference is not escalated to itself
    plain = {r["size"]: r for r in haiku["sizes"]}
    escalated = {r["size"]: r for r in haiku["escalation"]}
    assert list(escalated) == [5, 10] and haiku["recommended"] is None
    alone = haiku["sizes"][0]
    for size, r in escalated.items():
        assert r["escalated_to"] == SONNET and r["sent_up"] > 0
        assert r["rate"] >= ESCALATION_TARGET > plain[size]["rate"], (size, r, plain[size])
        # both passes paid; the whole document: two passes and the share sent up alone
        assert r["cost_usd"] > plain[size]["cost_usd"]
        expected = 2 * plain[size]["whole_cost_usd"] + alone["whole_cost_usd"] * r["sent_up"] / 30
        assert abs(r["whole_cost_usd"] - expected) < 1e-9
    assert haiku["escalation_recommended"] == 10
    # the second packings ran on Haiku, other neighbours; no call was made on Sonnet for
    # the blocks sent up: Sonnet was asked only by its own runs
    second_runs = {r["second_run_id"] for r in escalated.values()}
    calls = await bbstack.pool.fetch(
        "select run_id, model, count(*) as n from llm_calls group by 1, 2"
    )
    ran = {(r["run_id"], r["model"]): r["n"] for r in calls}
    assert all((run, HAIKU) in ran and (run, SONNET) not in ran for run in second_runs)
    sonnet_runs = {r["run_id"] for r in sonnet["sizes"]}
    assert {run for run, model in ran if model == SONNET} == sonnet_runs
    # the choice: Haiku escalated, cheaper than Sonnet packed, with the flags that run it
    choice = m["choice"]
    assert (choice["model"], choice["escalate_to"]) == (HAIKU, SONNET), choice
    assert choice["whole_cost_usd"] < min(r["whole_cost_usd"] for r in sonnet["sizes"][1:])
    # the quote now expects the share the calibration sent up at the size nearest its packs
    code, out, err = await cli(
        bbstack,
        capsys,
        "estimate",
        doc,
        "--schema",
        schema,
        "--model",
        HAIKU,
        "--pack-size",
        "10",
        "--escalate-to",
        SONNET,
    )
    assert code == 0, err
    share = escalated[10]["sent_up"] / 30
    assert f"expected: {share:.1%} sent up (calibration {m['calibration_id']}:{HAIKU})" in out, out
    assert f"each 1% of blocks sent up alone on {SONNET}" in out, out
    print_model_calibration(Console(), ModelCalibration.model_validate(m))
    table = capsys.readouterr().out
    for text in (
        f"{HAIKU} -> {SONNET}",
        f"--model {HAIKU} --pack-size {choice['size']} --escalate-to {SONNET}",
        f"escalated to {SONNET}, size 10",
    ):
        assert text in table, (text, table)
