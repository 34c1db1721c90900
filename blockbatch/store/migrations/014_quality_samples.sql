-- 014: the quality probe (issue #15). A deterministic sample of a run's blocks is also
-- asked alone, one block per call (ledger purpose 'quality_probe'), and its packed answer
-- compared with that single answer field by field (core/agreement.py). One row per sampled
-- block: written 'planned' when the run is planned (store/quality.py), then 'compared' once
-- its single answer is in, or 'failed' (the probe call failed: the run goes on) or
-- 'skipped' (the run stopped, or its budget could not hold the probe call).
create table quality_samples (
    run_id       text not null references runs (run_id) on delete cascade,
    block_uid    text not null,
    status       text not null default 'planned'
                 check (status in ('planned', 'compared', 'failed', 'skipped')),
    -- The pack that answered the block: its size (blocks in that call, after any halving)
    -- and the block's position in it (1 for the first).
    pack_size    integer,
    position     integer,
    -- The packed answer (the overlay's staging as the model wrote it) and the single one.
    packed       jsonb,
    single       jsonb,
    -- core.agreement.FieldAgreement per field: field, kind, agree, similarity.
    fields       jsonb,
    -- Every field agreed (block-level agreement).
    agrees       boolean,
    -- The ledger row of the single call.
    llm_call_id  bigint,
    error        text,
    created_at   timestamptz not null default now(),
    compared_at  timestamptz,
    primary key (run_id, block_uid)
);
-- Review's "disagreeing" filter: a run's blocks whose packed and single answers differ.
create index quality_samples_disagreeing on quality_samples (run_id) where agrees = false;

-- The quality gate re-plans a run's unstarted packs at a smaller pack size: the same
-- plan_changes row as packs that learn, told apart by ``kind`` ('learned' | 'quality_gate'),
-- with the size the gate set and what it saw (agreement, interval, samples, target).
alter table plan_changes add column kind text not null default 'learned',
                         add column pack_size integer,
                         add column gate jsonb;
alter table plan_changes drop constraint plan_changes_pkey,
                         add primary key (run_id, first_pack, kind);
