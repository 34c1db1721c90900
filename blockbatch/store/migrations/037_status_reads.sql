-- 037: `status` reads a million-block run in well under a second (issue 39).
--
-- The run summary's quality section (store/quality.py ``result``) read every sample of the
-- run row by row, summed every ledger row of the run from the table's wide rows, and looked
-- at every overlay of the run for evidence: 5.7 s on a seeded run of a million blocks with
-- 333,000 samples, the bulk of `status`'s 7.8 s median on the million-block benchmark
-- (docs/benchmarks.md section 3.5). The samples are now counted in Postgres, grouped
-- (``agreement``), and these indexes let each read touch only the index entries it counts.

-- The probe's counts (planned, failed, compared) and the agreement's groups: index-only.
create index if not exists quality_samples_run_status on quality_samples (run_id, status)
    include (pack_size, position, agrees);

-- The probe's calls and cost and the run's cost (``probe_cost``): index-only, not a read of
-- every ledger row (each carries its request and raw response).
create index if not exists llm_calls_run_purpose on llm_calls (run_id, purpose)
    include (status, cost_usd);

-- Grounding (``grounding``) reads only overlays with evidence: none in a run whose schema
-- does not ask for it, instead of every overlay of the run.
create index if not exists overlays_run_evidence on overlays (run_id) where evidence is not null;

-- Each planned pack's block count, kept as overlays change (statement triggers, as
-- run_block_counts in migration 034): the pack size the run settled on and the blocks it
-- planned into packs (``planned_pack_size``, ``sample_plan``) are read from a run's packs,
-- not counted over every overlay of the run.
create table if not exists run_packs (
    run_id     text not null references runs (run_id) on delete cascade,
    pack_index integer not null,
    blocks     integer not null,
    primary key (run_id, pack_index)
);

-- Adds a statement's per-pack deltas (rows it inserted, moved between packs or deleted); a
-- pack left with no block is deleted. Packs are written in (run, pack) order, so two
-- statements lock them in the same order. A run's deletion takes its packs (the cascade).
create or replace function run_packs_apply(delta jsonb) returns void language sql as $$
    insert into run_packs as p (run_id, pack_index, blocks)
    select d.run_id, d.pack_index, d.n
    from jsonb_to_recordset(delta) as d (run_id text, pack_index integer, n integer)
    where exists (select 1 from runs r where r.run_id = d.run_id)
    order by d.run_id, d.pack_index
    on conflict (run_id, pack_index) do update set blocks = p.blocks + excluded.blocks;
    delete from run_packs p
    using jsonb_to_recordset(delta) as d (run_id text, pack_index integer, n integer)
    where p.run_id = d.run_id and p.pack_index = d.pack_index and p.blocks <= 0;
$$;

create or replace function run_packs_move() returns trigger language plpgsql as $$
declare
    delta jsonb;
begin
    if tg_op = 'INSERT' then
        select jsonb_agg(d) into delta
        from (select run_id, pack_index, count(*) as n from new_rows
              where pack_index is not null group by 1, 2) d;
    elsif tg_op = 'UPDATE' then
        select jsonb_agg(d) into delta
        from (select run_id, pack_index, sum(n) as n
              from (select run_id, pack_index, count(*) as n from new_rows
                    where pack_index is not null group by 1, 2
                    union all
                    select run_id, pack_index, -count(*) from old_rows
                    where pack_index is not null group by 1, 2) x
              group by 1, 2 having sum(n) <> 0) d;
    else
        select jsonb_agg(d) into delta
        from (select run_id, pack_index, -count(*) as n from old_rows
              where pack_index is not null group by 1, 2) d;
    end if;
    if delta is not null then
        perform run_packs_apply(delta);
    end if;
    return null;
end $$;

drop trigger if exists overlays_packs_insert on overlays;
create trigger overlays_packs_insert after insert on overlays
    referencing new table as new_rows
    for each statement execute function run_packs_move();
drop trigger if exists overlays_packs_update on overlays;
create trigger overlays_packs_update after update on overlays
    referencing old table as old_rows new table as new_rows
    for each statement execute function run_packs_move();
drop trigger if exists overlays_packs_delete on overlays;
create trigger overlays_packs_delete after delete on overlays
    referencing old table as old_rows
    for each statement execute function run_packs_move();

-- The runs made before this migration: counted once, here.
insert into run_packs (run_id, pack_index, blocks)
select run_id, pack_index, count(*) from overlays where pack_index is not null group by 1, 2
on conflict (run_id, pack_index) do update set blocks = excluded.blocks;
