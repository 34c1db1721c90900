"""starter.py calibrate on the real stack, with the simulator wrong like a model in big packs.

The commands run in-process (``amain``), as the CLI would run them, to keep the test short.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blockbatch.cli import amain
from blockbatch.cli.calibrate import print_calibration
from blockbatch.cli.console import Console
from blockbatch.core.calibration import Calibration
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
    assert "calibrated: size 4 meets 90.0% (calibration of " in out, out

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
