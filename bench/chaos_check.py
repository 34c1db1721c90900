"""The chaos invariants, checked from Postgres, the ledger and the simulator's own log.

Nothing here trusts blockbatch's counters: every figure is recomputed from rows.

* **lost**: a block of the document without an overlay, an overlay still ``pending`` after
  the run ended, or one that ``finish_run`` had to close because no pack finished it.
* **written twice**: measured by an audit trigger that this harness adds to the
  throw-away database (:func:`install_audit`): a block whose staging was written more than
  once, or whose final status was later changed. Cross-checked against the ledger: every
  ``ai_complete`` overlay must name a succeeded, applied call whose pack held the block and
  whose raw answer, re-parsed, gives exactly that staging; and no block may be answered
  validly by two applied calls.
* **paid twice**: a pack attempt ``(run, pack_path, pack_attempt)`` with more than one
  answered ledger row (``succeeded``, or an answer discarded as ``duplicate_attempt``).
  Separately, answers the simulator generated (and billed) that no ledger row holds: a
  worker SIGKILLed while waiting for Claude cannot record what it was about to receive, so
  Temporal runs that attempt again and it is asked again. Those are counted, not hidden.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import asyncpg

from blockbatch.core.registry import ModelInfo, Usage, cost_usd
from blockbatch.core.results import parse_results
from blockbatch.store.runs import load_run_context

AUDIT_SQL = """
create table if not exists chaos_overlay_writes (
    id              bigserial primary key,
    run_id          text not null,
    block_uid       text not null,
    old_status      text not null,
    new_status      text not null,
    staging_written boolean not null,
    call_id         bigint,
    at              timestamptz not null default clock_timestamp()
);
create or replace function chaos_audit_overlay() returns trigger language plpgsql as $$
begin
    if old.status is distinct from new.status or old.staging is distinct from new.staging then
        insert into chaos_overlay_writes
            (run_id, block_uid, old_status, new_status, staging_written, call_id)
        values (new.run_id, new.block_uid, old.status, new.status,
                old.staging is distinct from new.staging, new.call_id);
    end if;
    return new;
end $$;
drop trigger if exists chaos_audit on overlays;
create trigger chaos_audit after update on overlays
    for each row execute function chaos_audit_overlay();
"""


async def install_audit(conn: asyncpg.Connection) -> None:
    """Record every status or staging change of an overlay (chaos databases only)."""
    await conn.execute(AUDIT_SQL)


def _short(reason: str | None, limit: int = 90) -> str:
    text = " ".join((reason or "(no reason)").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def check_run(
    conn: asyncpg.Connection,
    run_id: str,
    *,
    sim_log: list[dict[str, Any]] | None = None,
    fault_free: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every invariant of one finished run, as a JSON-ready dict.

    Args:
        conn: a connection to the run's database.
        run_id: the run.
        sim_log: ``GET /_sim/requests`` covering exactly this run's requests, if available.
        fault_free: ``{"calls": n, "staging": {block_uid: overlay}}`` of the same document
            run without faults, to compare calls and values.
    """
    run = await conn.fetchrow("select * from runs where run_id = $1", run_id)
    if run is None:
        raise LookupError(f"no run {run_id}")
    blocks_total = await conn.fetchval(
        "select count(*) from blocks where document_id = $1", run["document_id"]
    )
    rows = await conn.fetch(
        """select o.block_uid, o.status, o.staging, o.last_error, o.call_id
           from overlays o where o.run_id = $1""",
        run_id,
    )
    by_status = Counter(r["status"] for r in rows)
    no_pack = [
        r
        for r in rows
        if r["status"] == "failed" and "no pack finished this block" in (r["last_error"] or "")
    ]
    failed_reasons = Counter(_short(r["last_error"]) for r in rows if r["status"] == "failed")
    lost = {
        "no_overlay": blocks_total - len(rows),
        "pending_after_end": by_status.get("pending", 0),
        "closed_because_no_pack_finished_it": len(no_pack),
    }

    # --- written twice: the audit trigger
    audit = (
        await conn.fetch(
            """select block_uid,
                  count(*) filter (where staging_written) as staging_writes,
                  count(*) filter (where old_status <> 'pending') as final_changed
           from chaos_overlay_writes where run_id = $1 group by block_uid""",
            run_id,
        )
        if await _has_audit(conn)
        else None
    )
    # --- written twice: the ledger
    ctx = await load_run_context(conn, run_id)
    calls = await conn.fetch(
        """select call_id, pack_path, pack_attempt, block_uids, block_aliases, status,
                  response, error_type,
                  http_status, request_id, applied_at, cost_usd
           from llm_calls where run_id = $1 order by call_id""",
        run_id,
    )
    valid_by_call: dict[int, dict[str, Any]] = {}
    claims: Counter[str] = Counter()
    for c in calls:
        if c["status"] == "succeeded" and c["applied_at"] is not None:
            parsed = parse_results(
                c["response"], list(c["block_uids"]), ctx.spec, c["block_aliases"]
            )
            valid_by_call[c["call_id"]] = parsed.valid
            claims.update(parsed.valid.keys())
    call_of = {c["call_id"]: c for c in calls}
    not_from_its_call = 0
    differs_from_fault_free = 0
    reference = (fault_free or {}).get("staging")
    for r in rows:
        if r["status"] != "ai_complete":
            continue
        call = call_of.get(r["call_id"])
        valid = valid_by_call.get(r["call_id"], {})
        if (
            call is None
            or r["block_uid"] not in call["block_uids"]
            or valid.get(r["block_uid"]) != r["staging"]
        ):
            not_from_its_call += 1
        if reference is not None and reference.get(r["block_uid"]) != r["staging"]:
            differs_from_fault_free += 1
    written_twice = {
        "staging_written_more_than_once": (
            sum(1 for a in audit if a["staging_writes"] > 1) if audit is not None else None
        ),
        "final_status_changed": (
            sum(1 for a in audit if a["final_changed"] > 0) if audit is not None else None
        ),
        "overlay_not_from_its_ledger_call": not_from_its_call,
        "block_valid_in_several_applied_calls": sum(1 for n in claims.values() if n > 1),
    }

    # --- calls and money
    status_count = Counter(c["status"] for c in calls)
    errors = Counter(
        f"{c['http_status'] or '-'} {c['error_type']}" for c in calls if c["status"] == "failed"
    )
    answered = Counter(
        (c["pack_path"], c["pack_attempt"])
        for c in calls
        if c["status"] == "succeeded" or c["error_type"] == "duplicate_attempt"
    )
    recorded_ids = {c["request_id"] for c in calls if c["request_id"]}
    # An answer the simulator generated (and billed) that no ledger row holds: sent to a
    # worker that was killed while waiting, or cut off when its connection closed.
    generated = [e for e in (sim_log or []) if e.get("stop_reason") is not None]
    never_recorded = [e for e in generated if e["request_id"] not in recorded_ids]
    billed = sum(_cost(ctx.model, e["usage"]) for e in generated)
    out: dict[str, Any] = {
        "run_id": run_id,
        "run_status": run["status"],
        "run_error": run["error"],
        "blocks": {
            "total": blocks_total,
            "ai_complete": by_status.get("ai_complete", 0),
            "failed": by_status.get("failed", 0) - len(no_pack),
            "failed_reasons": dict(failed_reasons.most_common()),
            "cancelled": by_status.get("cancelled", 0),
            "lost": sum(lost.values()),
            "lost_detail": lost,
            "written_twice": sum(v or 0 for v in written_twice.values()),
            "written_twice_detail": written_twice,
        },
        "calls": {
            "ledger_rows": len(calls),
            "by_status": dict(status_count),
            "errors": dict(errors.most_common()),
            "succeeded": status_count.get("succeeded", 0),
            "packs_planned": run["pack_count"],
            "split_events": await conn.fetchval(
                "select count(*) from split_events where run_id = $1", run_id
            ),
            "fault_free": (fault_free or {}).get("calls"),
            "simulator_requests": len(sim_log) if sim_log is not None else None,
            "simulator_answers": len(generated) if sim_log is not None else None,
            "paid_twice_same_attempt": sum(1 for n in answered.values() if n > 1),
            "answers_discarded_duplicate_attempt": sum(
                1 for c in calls if c["error_type"] == "duplicate_attempt"
            ),
            "answers_never_recorded": len(never_recorded) if sim_log is not None else None,
            "cost_usd": float(sum(c["cost_usd"] for c in calls)),
            "billed_by_simulator_usd": round(billed, 6) if sim_log is not None else None,
            "fault_free_cost_usd": (fault_free or {}).get("cost_usd"),
        },
        "values": {
            "differs_from_fault_free": differs_from_fault_free if reference is not None else None,
        },
    }
    return out


def _cost(model: ModelInfo, usage: dict[str, Any]) -> float:
    creation = usage.get("cache_creation") or {}
    return cost_usd(
        model,
        Usage(
            input_tokens=usage["input_tokens"],
            output_tokens=usage["output_tokens"],
            cache_creation_input_tokens=usage["cache_creation_input_tokens"],
            cache_read_input_tokens=usage["cache_read_input_tokens"],
            cache_creation_1h_tokens=creation.get("ephemeral_1h_input_tokens") or 0,
        ),
    )


async def _has_audit(conn: asyncpg.Connection) -> bool:
    return bool(await conn.fetchval("select to_regclass('chaos_overlay_writes') is not null"))


async def fault_free_reference(conn: asyncpg.Connection, run_id: str) -> dict[str, Any]:
    """Calls, cost and values of a fault-free run, for :func:`check_run`'s comparison."""
    staging = {
        r["block_uid"]: r["staging"]
        for r in await conn.fetch(
            "select block_uid, staging from overlays where run_id = $1 and status = 'ai_complete'",
            run_id,
        )
    }
    calls = await conn.fetchval("select count(*) from llm_calls where run_id = $1", run_id)
    cost = await conn.fetchval(
        "select coalesce(sum(cost_usd), 0) from llm_calls where run_id = $1", run_id
    )
    return {"run_id": run_id, "calls": calls, "cost_usd": float(cost), "staging": staging}


def violations(result: dict[str, Any]) -> list[str]:
    """The invariants a chaos run must keep, as readable failures (empty: all kept)."""
    b, c = result["blocks"], result["calls"]
    out = []
    if result["run_status"] != "completed":
        why = b.get("failed_reasons") or {}
        failed = f"; {b['failed']} blocks failed: {why}" if b.get("failed") else ""
        out.append(f"run ended {result['run_status']}: {result['run_error']}{failed}")
    if b["lost"]:
        out.append(f"{b['lost']} blocks lost: {b['lost_detail']}")
    if b["written_twice"]:
        out.append(f"{b['written_twice']} blocks written twice: {b['written_twice_detail']}")
    if c["paid_twice_same_attempt"]:
        out.append(f"{c['paid_twice_same_attempt']} pack attempts paid twice")
    if b["ai_complete"] + b["failed"] + b["cancelled"] != b["total"]:
        out.append("blocks do not add up: " + repr(b))
    if result["values"]["differs_from_fault_free"]:
        out.append(
            f"{result['values']['differs_from_fault_free']} overlays differ from the fault-free run"
        )
    o = result.get("outage")
    if o:
        if o["blocks_failed_api_unavailable"]:
            out.append(
                f"{o['blocks_failed_api_unavailable']} blocks failed because Claude "
                "was down (the run should have paused)"
            )
        if not o["seen_paused"]:
            out.append("the run was never seen paused (waiting_for_api) during the outage")
        if not o["probes_answered"]:
            out.append("no probe was answered: the run did not resume by itself")
    return out
