"""Escalation (``Blockbatch.escalate``, docs/ESCALATION.md) through the real stack: a cheap
run's doubtful blocks end with the strong model's answer, and no block is paid twice on
one model."""

from __future__ import annotations

import json

import aiohttp
import pytest
from temporalio.testing import ActivityEnvironment

from activities.escalation import EscalationActivities
from activities.llm import LlmActivities
from blockbatch.api.errors import BadRequest, RunStillActive
from blockbatch.core.agreement import compare_properties
from blockbatch.core.escalation_types import EscalateInput, EscalationPartInput, SecondPassInput
from blockbatch.core.quality_types import QualityOptions
from blockbatch.core.run_types import RunOptions, RunResult
from blockbatch.report import summary_lines
from blockbatch.runtime.claude import anthropic_client
from blockbatch.simulator.content import block_result
from blockbatch.simulator.prompt import Block
from blockbatch.simulator.scenario import ASSUMED_MODEL_QUALITY
from blockbatch.web.app import create_app
from tests.conftest import Stack
from tests.helpers import extract_schema, markdown_doc
from tests.starter_fixtures import Cli, cli_fixture  # noqa: F401 - provides `cli`
from tests.waiting import until
from tests.web_helpers import serving

HAIKU, SONNET = "claude-haiku-5-5", "claude-sonnet-5-5"


async def _on_assumed_rates(bbstack: Stack, *, seed: int, blocks: int) -> tuple[str, str]:
    """The simulator on its assumed per-model rates (bench/models.py), and a document of
    ``blocks`` blocks with its schema: ``(document id, schema id)``."""
    bbstack.sim.scenario(
        seed=seed,
        quality={
            "enabled": True,
            "skip_per_extra_block": 0.0,
            "bleed_per_extra_block": 0.0,
            "models": {m: q.model_dump() for m, q in ASSUMED_MODEL_QUALITY.items()},
        },
    )
    doc = await bbstack.bb.ingest_bytes(markdown_doc(blocks), name="doc.md", fmt="markdown")
    return doc, await bbstack.bb.add_schema(extract_schema(200))


async def _run_then_escalate(
    bbstack: Stack, doc: str, schema_id: str, options: RunOptions, run_id: str
) -> tuple[RunResult, RunResult]:
    """Run ``options`` on the document under ``run_id``, then escalate it to Sonnet:
    ``(the run's result, the result after its escalation)``."""
    await bbstack.bb.start_run(doc, schema_id, options, run_id=run_id)
    async with bbstack.worker():
        first = await bbstack.bb.wait(run_id)
        assert first.status == "completed"
        await bbstack.bb.escalate(run_id, SONNET)
        return first, await bbstack.bb.wait_escalation(run_id)


def _json(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else json.loads(str(value))


async def test_escalation_replaces_doubtful_answers_and_pays_once_per_model(
    bbstack: Stack,
) -> None:
    # Haiku is wrong about many blocks, more so in packs (so two packings often differ);
    # Sonnet is never wrong: every escalated block ends at the truth.
    bbstack.sim.scenario(
        seed=3,
        quality={
            "enabled": True,
            "free_blocks": 2,
            "skip_per_extra_block": 0,
            "bleed_per_extra_block": 0,
            "models": {HAIKU: {"wrong_alone": 0.05, "wrong_per_extra_block": 0.03}, SONNET: {}},
        },
    )
    schema = extract_schema(200)
    properties = schema["properties"]
    doc = await bbstack.bb.ingest_bytes(markdown_doc(48), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(schema)
    run_id = await bbstack.bb.start_run(
        doc,
        schema_id,
        RunOptions(
            model=HAIKU,
            pack_size=12,
            reuse_answers=False,
            quality=QualityOptions(probe_rate=0.0, probe_minimum=0),
        ),
    )
    async with bbstack.worker():
        first = await bbstack.bb.wait(run_id)
        assert first.status == "completed"
        with pytest.raises(BadRequest, match="stronger model"):
            await bbstack.bb.escalate(run_id, HAIKU)
        await bbstack.bb.escalate(run_id, SONNET)
        result = await bbstack.bb.wait_escalation(run_id)
        with pytest.raises((BadRequest, RunStillActive), match="escalated already"):
            await bbstack.bb.escalate(run_id, SONNET)

    assert result.status == "completed"
    esc = result.escalation
    assert esc is not None and esc.model == SONNET and esc.status == "done"
    assert esc.blocks == 48 and esc.compared == 48
    assert esc.sent_up == esc.escalated > 0 and esc.kept == 48 - esc.sent_up
    assert esc.second_pass_calls == 4 and esc.escalation_calls == esc.escalated
    assert esc.second_pass_cost_usd > 0 and esc.escalation_cost_usd > 0

    rows = await bbstack.pool.fetch(
        """select e.block_uid, e.status, e.reason, e.first_answer, e.second_answer,
                  e.escalation_answer,
                  e.escalation_call_id, o.staging, o.call_id, o.status as overlay_status,
                  b.block_type, b.block_content
           from escalations e join overlays o using (run_id, block_uid)
           join blocks b using (block_uid) where e.run_id = $1""",
        run_id,
    )
    for r in rows:
        assert r["overlay_status"] == "ai_complete"
        if r["status"] == "escalated":
            truth = block_result(Block("x", r["block_type"], r["block_content"]), properties)
            # The overlay holds Sonnet's answer, which is the truth here.
            assert _json(r["staging"]) == _json(r["escalation_answer"])
            assert all(f.agree for f in compare_properties(properties, _json(r["staging"]), truth))
            assert r["call_id"] == r["escalation_call_id"]
        else:
            assert r["status"] == "kept" and r["reason"] is None
            assert _json(r["staging"]) == _json(r["first_answer"])

    # Paid once per model: every block is in one answered call per purpose, each purpose
    # on its own model.
    paid = await bbstack.pool.fetch(
        """select uid, model, purpose, count(*) as n
           from llm_calls c, unnest(c.block_uids) as uid
           where c.run_id = $1 and c.status = 'succeeded' group by 1, 2, 3""",
        run_id,
    )
    assert {(p["purpose"], p["model"]) for p in paid} == {
        ("pack", HAIKU),
        ("second_pass", HAIKU),
        ("escalation", SONNET),
    }
    assert all(p["n"] == 1 for p in paid)
    per_model = await bbstack.pool.fetch(
        """select uid, model, count(*) as n from llm_calls c, unnest(c.block_uids) as uid
           where c.run_id = $1 and c.status = 'succeeded' group by 1, 2
           having count(*) > case when model = $2 then 2 else 1 end""",
        run_id,
        HAIKU,
    )
    assert per_model == []

    # A quote of the same escalation now expects the share this one sent up.
    quoted = await bbstack.bb.estimate(
        markdown_doc(48),
        schema,
        RunOptions(model=HAIKU, pack_size=12),
        fmt="markdown",
        name="doc.md",
        escalate_to=SONNET,
    )
    e = quoted.escalation
    assert e is not None and e.to == SONNET and e.share_source == "1 earlier escalation"
    assert e.share is not None and e.share == pytest.approx(esc.sent_up / 48)
    assert e.expected_usd == pytest.approx(e.second_pass_usd + e.share * e.alone_usd)
    assert e.alone_usd > e.second_pass_usd > 0

    # The second pass read the prefix the first pass cached (same system prompt and tool).
    prefixes = await bbstack.pool.fetch(
        """select distinct prefix_sha256 from llm_calls
           where run_id = $1 and model = $2 and status = 'succeeded'""",
        run_id,
        HAIKU,
    )
    assert len(prefixes) == 1
    read = await bbstack.pool.fetchval(
        """select sum(cache_read_input_tokens) from llm_calls
           where run_id = $1 and purpose = 'second_pass'""",
        run_id,
    )
    assert read > 0

    # The review grid marks the escalated blocks and shows their three answers.
    up = {r["block_uid"] for r in rows if r["status"] == "escalated"}
    grid = await bbstack.bb.review(run_id, limit=48)
    marked = {row.block_uid: row.escalation for row in grid.rows if row.escalation}
    assert set(marked) == up
    some = next(iter(marked.values()))
    assert some["status"] == "escalated" and some["model"] == SONNET
    assert some["first"] and some["escalated"] and "second" in some
    app = create_app(bbstack.bb, bbstack.settings, reviewer="ada")
    async with (
        serving(app) as base,
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http,
    ):
        page = await http.get(f"{base}/runs/{run_id}?limit=48")
        html = await page.text()
    assert page.status == 200
    assert html.count('<details class="escalation e-escalated">') == len(up)
    assert f"alone on {SONNET}" in html and "second packing" in html


async def test_starter_run_escalate_to_follows_the_run_then_the_escalation(
    bbstack: Stack, cli: Cli
) -> None:
    bbstack.sim.scenario(
        seed=5,
        quality={
            "enabled": True,
            "free_blocks": 2,
            "skip_per_extra_block": 0,
            "bleed_per_extra_block": 0,
            "models": {HAIKU: {"wrong_alone": 0.05, "wrong_per_extra_block": 0.03}, SONNET: {}},
        },
    )
    doc, schema = cli.doc(24), cli.schema()
    args = ("--schema", schema, "--model", HAIKU, "--pack-size", "8")
    quiet = ("--set", "quality.probe_rate=0", "--set", "quality.probe_minimum=0")
    async with bbstack.worker():
        bad = await cli("run", doc, *args, "--escalate-to", "claude-nonesuch")
        assert bad.code != 0 and "claude-nonesuch" in bad.out + bad.err
        out = await cli("run", doc, *args, *quiet, "--escalate-to", SONNET)
        assert out.code == 0, out.out + out.err
        run_id = out.run_id
        again = await cli("escalate", run_id, "--to", SONNET)
    assert f"escalating run {run_id} to {SONNET}" in out.out
    assert f"escalated    to {SONNET}: 24 of 24 blocks compared in a second packing" in out.out
    assert "escalation $ second pass 3 calls $" in out.out
    assert again.code != 0 and "escalated already" in again.out + again.err
    esc = await bbstack.bb.escalation(run_id)
    assert esc is not None and esc.escalation_calls == esc.escalated == esc.sent_up


async def test_retried_activities_reuse_recorded_answers_and_spare_reviewed_blocks(
    bbstack: Stack,
) -> None:
    pool = bbstack.pool
    bbstack.sim.scenario(
        seed=7,
        quality={
            "enabled": True,
            "free_blocks": 2,
            "skip_per_extra_block": 0,
            "bleed_per_extra_block": 0,
            "models": {HAIKU: {"wrong_alone": 0.1, "wrong_per_extra_block": 0.04}, SONNET: {}},
        },
    )
    doc = await bbstack.bb.ingest_bytes(markdown_doc(30), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(200))
    options = RunOptions(
        model=HAIKU,
        pack_size=10,
        reuse_answers=False,
        quality=QualityOptions(probe_rate=0.0, probe_minimum=0),
    )
    run_id = await bbstack.bb.start_run(doc, schema_id, options)
    async with bbstack.worker():
        assert (await bbstack.bb.wait(run_id)).status == "completed"
    # Block 0 failed in the first pass (as if refused): it goes up at once.
    failed = f"{doc}:0"
    await pool.execute(
        """update overlays set status = 'failed', staging = null, reason_code = 'refused'
           where run_id = $1 and block_uid = $2""",
        run_id,
        failed,
    )
    acts = EscalationActivities(pool, LlmActivities(pool, anthropic_client(bbstack.settings)).calls)
    env = ActivityEnvironment()
    inp = EscalateInput(run_id=run_id, model=SONNET)
    plan = await env.run(acts.plan_escalation, inp)
    assert (plan.blocks, plan.up_at_once, plan.second_packs) == (30, 1, 3)
    assert await env.run(acts.plan_escalation, inp) == plan  # a retried plan: the same

    async def calls() -> int:
        return int(await pool.fetchval("select count(*) from llm_calls where run_id = $1", run_id))

    # A second pack's activity retried after its answer was recorded (its rows not yet
    # moved): the recorded answer is reused, nothing is paid again.
    first = await env.run(acts.second_pass, SecondPassInput(run_id=run_id, second_pack=0))
    assert first.calls == 1
    before = await calls()
    await pool.execute(
        """update escalations set status = 'planned', reason = null
           where run_id = $1 and second_pack = 0""",
        run_id,
    )
    again = await env.run(acts.second_pass, SecondPassInput(run_id=run_id, second_pack=0))
    assert (again.calls, again.to_escalate, await calls()) == (0, first.to_escalate, before)
    for n in (1, 2):
        await env.run(acts.second_pass, SecondPassInput(run_id=run_id, second_pack=n))
    up = await env.run(acts.count_to_escalate, inp)
    assert up >= 2
    rows = await pool.fetch(
        """select block_uid, reason from escalations where run_id = $1 and reason is not null
           order by block_index""",
        run_id,
    )
    assert rows[0]["block_uid"] == failed and rows[0]["reason"] == "refused"
    # A person confirms a doubtful block before the escalation reaches it: it stays theirs.
    reviewed = rows[1]["block_uid"]
    await bbstack.bb.confirm(run_id, [reviewed])
    parts = await env.run(acts.escalate_blocks, EscalationPartInput(run_id=run_id, part=0))
    assert parts.calls == up
    states = {
        r["block_uid"]: (r["status"], r["ostatus"], r["staging"] == r["escalation_answer"])
        for r in await pool.fetch(
            """select e.block_uid, e.status, o.status as ostatus, o.staging,
                      e.escalation_answer
               from escalations e join overlays o using (run_id, block_uid)
               where e.run_id = $1 and e.reason is not null""",
            run_id,
        )
    }
    assert states[failed] == ("escalated", "ai_complete", True)
    assert states[reviewed] == ("skipped", "confirmed", False)
    # The escalation activity retried after its answers were recorded: no new call.
    await pool.execute(
        """update escalations set status = 'to_escalate'
           where run_id = $1 and block_uid = $2""",
        run_id,
        reviewed,
    )
    before = await calls()
    redo = await env.run(acts.escalate_blocks, EscalationPartInput(run_id=run_id, part=0))
    assert (redo.calls, await calls()) == (0, before)


async def test_a_second_pass_alone_asks_each_block_in_a_call_of_its_own(bbstack: Stack) -> None:
    bbstack.sim.scenario(seed=2)
    doc = await bbstack.bb.ingest_bytes(markdown_doc(12), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(200))
    options = RunOptions(
        model=HAIKU,
        pack_size=6,
        reuse_answers=False,
        quality=QualityOptions(probe_rate=0.0, probe_minimum=0),
    )
    run_id = await bbstack.bb.start_run(doc, schema_id, options)
    async with bbstack.worker():
        await bbstack.bb.wait(run_id)
        await bbstack.bb.escalate(run_id, SONNET, second_pack_size=1)
        result = await bbstack.bb.wait_escalation(run_id)
    esc = result.escalation
    # Every answer right (no quality model): all 12 compared alone and kept, none sent up.
    assert esc is not None and (esc.compared, esc.kept, esc.sent_up) == (12, 12, 0)
    assert esc.second_pass_calls == 12 and esc.escalation_calls == 0
    sizes = await bbstack.pool.fetch(
        """select cardinality(block_uids) as n from llm_calls
           where run_id = $1 and purpose = 'second_pass'""",
        run_id,
    )
    assert {r["n"] for r in sizes} == {1}
    # A run that did not run to its end (here: marked cancelled) is retried first.
    await bbstack.pool.execute("update runs set status = 'cancelled' where run_id = $1", run_id)
    with pytest.raises(BadRequest, match="retry it first"):
        await bbstack.bb.escalate(run_id, SONNET)


async def test_cancel_stops_an_escalation_and_the_first_answers_stay(bbstack: Stack) -> None:
    bbstack.sim.scenario(seed=2)
    doc = await bbstack.bb.ingest_bytes(markdown_doc(24), name="doc.md", fmt="markdown")
    schema_id = await bbstack.bb.add_schema(extract_schema(200))
    options = RunOptions(
        model=HAIKU,
        pack_size=2,
        max_concurrent_packs=1,
        reuse_answers=False,
        quality=QualityOptions(probe_rate=0.0, probe_minimum=0),
    )
    run_id = await bbstack.bb.start_run(doc, schema_id, options)
    async with bbstack.worker():
        await bbstack.bb.wait(run_id)
        staged = await bbstack.pool.fetch(
            "select block_uid, staging from overlays where run_id = $1", run_id
        )
        # Every call now takes a third of a second: the cancel lands mid second pass.
        bbstack.sim.scenario(
            seed=2, speed_factor=1.0, latency={"ttft_ms": 300, "per_output_token_ms": 0}
        )
        await bbstack.bb.escalate(run_id, SONNET)

        async def second_pass_called() -> bool:
            return bool(
                await bbstack.pool.fetchval(
                    "select count(*) from llm_calls where run_id = $1 and purpose = 'second_pass'",
                    run_id,
                )
            )

        await until(second_pass_called, "a second-pass call", interval=0.1)
        await bbstack.bb.cancel(run_id)
        result = await bbstack.bb.wait_escalation(run_id)
    assert result.status == "completed"
    esc = result.escalation
    assert esc is not None and esc.status == "cancelled" and esc.left > 0
    assert 1 <= esc.second_pass_calls < 12 and esc.escalation_calls == 0
    after = await bbstack.pool.fetch(
        "select block_uid, staging from overlays where run_id = $1", run_id
    )
    assert {r["block_uid"]: r["staging"] for r in after} == {
        r["block_uid"]: r["staging"] for r in staged
    }

    # Asked again, a stopped escalation goes on where it stopped (to the same model only).
    bbstack.sim.scenario(seed=2)
    with pytest.raises(BadRequest, match=f"go on with `--to {SONNET}`"):
        await bbstack.bb.escalate(run_id, "claude-opus-5-5")
    async with bbstack.worker():
        await bbstack.bb.escalate(run_id, SONNET)
        resumed = await bbstack.bb.wait_escalation(run_id)
        with pytest.raises(BadRequest, match="escalated already"):
            await bbstack.bb.escalate(run_id, SONNET)
    done = resumed.escalation
    assert done is not None and done.status == "done" and done.left == 0
    assert done.compared == 24 and done.second_pass_calls == 12
    assert done.escalation_calls == done.escalated == done.sent_up
    paid = await bbstack.pool.fetch(
        """select uid, purpose, count(*) as n from llm_calls c, unnest(c.block_uids) as uid
           where c.run_id = $1 and c.status = 'succeeded' group by 1, 2 having count(*) > 1""",
        run_id,
    )
    assert paid == []


async def test_a_probe_on_the_escalation_model_is_not_paid_twice_and_measures_it(
    bbstack: Stack,
) -> None:
    # The simulator's assumed per-model rates (bench/models.py): Haiku wrong far more often
    # in packs of 40 than alone, Sonnet seldom. The probe asks its sample alone on Sonnet,
    # the escalation model: a sampled block sent up takes the probe's answer. Every block
    # is wanted in the sample; the probe's cost cap (at most the run's own cost) keeps as
    # many as that pays for.
    doc, schema_id = await _on_assumed_rates(bbstack, seed=1, blocks=1000)
    options = RunOptions(
        model=HAIKU,
        pack_size=40,
        reuse_answers=False,
        quality=QualityOptions(
            probe_rate=1.0, probe_minimum=0, probe_max_share=1.0, probe_model=SONNET
        ),
    )
    # A fixed run id: the probe's sample is seeded with it, so it is the same every time;
    # 4 of the 57-59 blocks sent up are in it here.
    run_id = "probed-escalation"
    first, result = await _run_then_escalate(bbstack, doc, schema_id, options, run_id)
    esc, probe = result.escalation, first.quality
    assert esc is not None and esc.status == "done" and probe is not None
    # The sample is capped by cost (Sonnet alone against Haiku in packs): about 1 in 20.
    assert 20 <= probe.sampled < 1000 // 10

    # Paid once per model: no block has two answered calls on Sonnet, the probe's and the
    # escalation's together.
    twice = await bbstack.pool.fetch(
        """select uid, model, count(*) as n from llm_calls c, unnest(c.block_uids) as uid
           where c.run_id = $1 and c.status = 'succeeded' and c.model = $2
           group by 1, 2 having count(*) > 1""",
        run_id,
        SONNET,
    )
    assert twice == []
    # Each sampled block that went up took the probe's answer and call; the others were
    # asked, one call each.
    up = await bbstack.pool.fetch(
        """select e.block_uid, e.status, e.escalation_call_id, e.escalation_answer,
                  q.llm_call_id as probe_call_id, q.single, o.call_id, o.staging
           from escalations e join overlays o using (run_id, block_uid)
           left join quality_samples q
             on q.run_id = e.run_id and q.block_uid = e.block_uid and q.status = 'compared'
           where e.run_id = $1 and e.reason is not null""",
        run_id,
    )
    reused = [r for r in up if r["probe_call_id"] is not None]
    assert all(r["status"] == "escalated" for r in up)
    assert len(reused) == esc.reused_from_probe > 0
    for r in reused:
        assert r["escalation_call_id"] == r["call_id"] == r["probe_call_id"]
        assert _json(r["staging"]) == _json(r["escalation_answer"]) == _json(r["single"])
    assert esc.escalated == len(up) and esc.escalation_calls == len(up) - len(reused)

    # The escalation checked on the probe's sample: before, the probe's own figure; after,
    # at least as good (the blocks sent up now hold Sonnet's answer alone).
    v = esc.vs_probe
    assert v is not None and v.probe_model == SONNET and not v.run_model
    assert v.before.samples == v.after.samples == probe.sampled
    assert v.before.agreeing == probe.agreement.agreeing
    assert v.after.rate is not None and v.before.rate is not None
    assert v.after.rate >= v.before.rate
    lines = summary_lines(result, baseline=None, links={"run": "r", "packs": "p"})
    assert any(
        line.startswith(
            f"  vs probe     on {probe.sampled} sampled blocks, answers agree with {SONNET} alone: "
        )
        for line in lines
    )


async def test_a_probe_on_the_runs_own_model_stands_in_for_the_second_pass(
    bbstack: Stack,
) -> None:
    # The default probe asks its sample alone on the run's own model: that answer is the
    # sampled blocks' second one, so they are in no second pack and no block is answered
    # by Haiku more than twice (its pack, and the probe or its second pack).
    doc, schema_id = await _on_assumed_rates(bbstack, seed=2, blocks=400)
    options = RunOptions(
        model=HAIKU,
        pack_size=40,
        reuse_answers=False,
        quality=QualityOptions(probe_rate=0.25, probe_minimum=0, probe_max_share=1.0),
    )
    run_id = "probe-second"
    first, result = await _run_then_escalate(bbstack, doc, schema_id, options, run_id)
    esc, probe = result.escalation, first.quality
    assert esc is not None and esc.status == "done" and probe is not None
    assert probe.sampled > 10

    rows = await bbstack.pool.fetch(
        """select e.block_uid, e.second_pack, e.second_call_id, e.second_answer, e.first_answer,
                  e.reason, e.status, q.llm_call_id as probe_call_id, q.single
           from escalations e left join quality_samples q
             on q.run_id = e.run_id and q.block_uid = e.block_uid and q.status = 'compared'
           where e.run_id = $1""",
        run_id,
    )
    sampled = [r for r in rows if r["probe_call_id"] is not None]
    assert len(sampled) == probe.sampled == esc.compared_with_probe
    for r in sampled:
        assert r["second_pack"] is None and r["second_call_id"] == r["probe_call_id"]
        assert _json(r["second_answer"]) == _json(r["single"])
        agree = all(
            f.agree
            for f in compare_properties(
                extract_schema(200)["properties"], _json(r["first_answer"]), _json(r["single"])
            )
        )
        assert (r["reason"] is None) == agree and r["status"] in ("kept", "escalated")
    assert any(r["reason"] == "disagrees" for r in sampled)  # some went up on the probe's word
    assert all(r["second_pack"] is not None for r in rows if r["probe_call_id"] is None)
    assert esc.compared == len(rows) - len(sampled) and esc.left == 0

    # Haiku answered each block at most twice; Sonnet at most once.
    paid = await bbstack.pool.fetch(
        """select uid, c.model, count(*) as n from llm_calls c, unnest(c.block_uids) as uid
           where c.run_id = $1 and c.status = 'succeeded' group by 1, 2""",
        run_id,
    )
    limit = {HAIKU: 2, SONNET: 1}
    assert [dict(p) for p in paid if p["n"] > limit[p["model"]]] == []
    lines = summary_lines(result, baseline=None, links={"run": "r", "packs": "p"})
    assert any(
        f"(and {probe.sampled} with the quality probe's answer alone, no second call)" in line
        for line in lines
    ), lines
