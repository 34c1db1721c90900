-- Escalation (`--escalate-to MODEL`, docs/ESCALATION.md): one row per block of a finished
-- run that an escalation took. `second_pack` is the block's pack in the second packing
-- (null: it failed or was refused in the first pass and goes up without a second answer).
-- status: planned (waiting for its second answer), kept (the two answers agree: the first
-- stays), to_escalate (`reason` says why: core.escalation.escalation_reason), escalated
-- (the escalation model's answer is the overlay), failed (its escalation call failed:
-- the first answer stays), skipped (the overlay changed meanwhile, e.g. a person reviewed
-- it: left as it is). A run is escalated at most once: the primary key.
create table escalations (
    run_id             text not null references runs (run_id) on delete cascade,
    block_uid          text not null references blocks (block_uid),
    block_index        integer not null,
    model              text not null,
    second_pack        integer,
    -- The block's place in the second order (core.escalation.second_order).
    second_position    integer,
    status             text not null default 'planned' check (status in
        ('planned', 'kept', 'to_escalate', 'escalated', 'failed', 'skipped')),
    reason             text,
    first_call_id      bigint,
    first_answer       jsonb,
    second_call_id     bigint,
    second_answer      jsonb,
    escalation_call_id bigint,
    escalation_answer  jsonb,
    error              text,
    updated_at         timestamptz not null default now(),
    primary key (run_id, block_uid)
);
create index escalations_run_pack on escalations (run_id, second_pack, block_index);
create index escalations_run_status on escalations (run_id, status, block_index);
-- Who an overlay's answer came from when an escalation replaced the run's own answer.
alter table overlays add column if not exists escalated_from bigint;
