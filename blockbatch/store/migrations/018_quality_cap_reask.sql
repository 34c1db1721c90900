-- 018: the quality probe's cost cap and the quality gate's re-asks (issue #15).
--
-- quality_plans: how a run's probe sample was sized when the run was planned: the blocks
-- the rate and minimum wanted, those planned once capped so that the probe's expected cost
-- stays within ``max_share`` of the run's (core.quality.probe_plan), and both expected
-- costs. One row per run that samples (none: a run planned before this migration).
create table quality_plans (
    run_id         text primary key references runs (run_id) on delete cascade,
    wanted         integer not null,
    planned        integer not null,
    max_share      float8 not null,
    est_probe_usd  float8 not null,
    est_run_usd    float8 not null
);

-- The pack whose answer a sample compared (set when it is compared, failed or skipped):
-- a block the quality gate re-asks moves to a new pack, and its earlier comparison must
-- not count as that new pack's (store.quality.pack_tally). Null: not probed yet, or a row
-- written before this migration (then the overlay's pack counts, as before).
alter table quality_samples add column pack_index integer;
