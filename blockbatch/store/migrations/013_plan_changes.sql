-- A run plans its packs from the schema's estimate of each answer, then again from what its
-- first answers really wrote (issue #14, packs that learn): each re-plan of the packs not
-- started yet is recorded here, so the run's summary and the Temporal UI can say what changed.
create table plan_changes (
    run_id       text not null references runs (run_id) on delete cascade,
    -- The first pack re-planned: every pack from it on had not started.
    first_pack   integer not null,
    packs_before integer not null,
    packs_after  integer not null,
    -- OutputRatios: overall, by_type, blocks, source.
    ratios       jsonb not null,
    changed_at   timestamptz not null default now(),
    primary key (run_id, first_pack)
);
