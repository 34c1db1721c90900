-- 005: retry only what failed.
--
-- A finished run's failed (and, when asked, cancelled) blocks can be run again in the same
-- run: store/retries.py resets them to pending and packs them after the run's existing
-- packs. The runs status check needs nothing new: a retry moves a finished run back to
-- 'running', and it ends in one of the final statuses of 003 again.

-- Every change of an overlay's status, staging or confirmed value, written by a trigger so
-- that no code path can change an overlay without leaving a row here. One insert per
-- change; an update that changes none of the three (an attempt charged to a pending block)
-- writes nothing. What a retry did, and did not, touch is read from here.
create table overlay_changes (
    id            bigserial primary key,
    run_id        text not null references runs (run_id) on delete cascade,
    block_uid     text not null,
    changed_at    timestamptz not null default now(),
    old_status    text not null,
    new_status    text not null,
    -- The overlay's values after the change.
    reason_code   text,
    last_error    text,
    attempt_count integer not null,
    pack_index    integer,
    pack_path     text,
    call_id       bigint,
    -- Whether staging or confirmed changed (the values themselves stay in overlays).
    value_changed boolean not null
);
create index overlay_changes_run on overlay_changes (run_id, block_uid, id);

create function log_overlay_change() returns trigger language plpgsql as $$
begin
    insert into overlay_changes (run_id, block_uid, old_status, new_status, reason_code,
                                 last_error, attempt_count, pack_index, pack_path, call_id,
                                 value_changed)
    values (new.run_id, new.block_uid, old.status, new.status, new.reason_code,
            new.last_error, new.attempt_count, new.pack_index, new.pack_path, new.call_id,
            old.staging is distinct from new.staging
                or old.confirmed is distinct from new.confirmed);
    return null;
end
$$;

create trigger overlays_log_change after update on overlays for each row
    when (old.status is distinct from new.status
          or old.staging is distinct from new.staging
          or old.confirmed is distinct from new.confirmed)
    execute function log_overlay_change();

-- One row per retry of a run. The row is inserted by the Temporal workflow run that claims
-- the retry (plan_retry, under the run row's lock), so a retried activity finds its own
-- claim and returns the same plan, and a second retry cannot claim a run already running.
create table run_retries (
    run_id          text not null references runs (run_id) on delete cascade,
    retry           integer not null check (retry >= 1),
    -- The RunWorkflow execution (Temporal run id) that claimed this retry.
    workflow_run_id text not null unique,
    -- What was asked: {"reasons": [...] | null, "blocks": [...] | null,
    -- "include_cancelled": bool}.
    selection       jsonb not null,
    -- Reason code -> how many of the retried blocks had failed (or were cancelled) for it.
    reasons         jsonb not null default '{}',
    block_count     integer not null check (block_count > 0),
    -- The retry's packs are first_pack .. pack_count - 1 (after the run's earlier packs).
    first_pack      integer not null,
    pack_count      integer not null,
    -- Batch mode: the first round of the retry (after every earlier round).
    first_round     integer,
    previous_status text not null,
    previous_error  text,
    started_at      timestamptz not null default now(),
    finished_at     timestamptz,
    final_status    text,
    primary key (run_id, retry)
);
