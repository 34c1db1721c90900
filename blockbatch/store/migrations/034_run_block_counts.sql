-- 034: a run's overlay counts kept as its overlays change, not counted on every read (issue 39).
--
-- `status`, `watch` and the run summary read a run's blocks per status
-- (blockbatch/store/reads.py ``get_run``). Counting the run's overlays costs a read of every
-- one of them: a million on a million-block run, on every look. Here the counts are kept in
-- one row per run, moved by statement triggers on overlays in the same transaction as the
-- overlays they count: a pack that commits its overlays commits their counts; one that rolls
-- back moves neither. A statement adds or takes away per status what it inserted, changed or
-- deleted (its transition tables), so the cost is the statement's rows, not the run's; a
-- statement that changes no status (staging, evidence, confirmations) writes nothing here.
create table if not exists run_block_counts (
    run_id text primary key references runs (run_id) on delete cascade,
    -- status -> how many of the run's overlays are in it (absent: none).
    counts jsonb not null default '{}'
);

-- The sum, per key, of two {status: count} objects.
create or replace function jsonb_add_counts(a jsonb, b jsonb) returns jsonb
language sql immutable as $$
    select coalesce(jsonb_object_agg(k, n), '{}')
    from (select k, sum(v::bigint) as n
          from (select key as k, value as v from jsonb_each_text(a)
                union all
                select key, value from jsonb_each_text(b)) t
          group by k) s
$$;

-- Adds the statement's per-run deltas. Runs in run_id order, so two statements touching
-- several runs lock their rows in the same order. A delete only updates: when a run is
-- deleted its counts row goes with it (the cascade), and nothing is recreated for it.
create or replace function run_block_counts_move() returns trigger language plpgsql as $$
begin
    if tg_op = 'INSERT' then
        insert into run_block_counts as c (run_id, counts)
        select run_id, jsonb_object_agg(status, n)
        from (select run_id, status, count(*) as n from new_rows group by 1, 2) d
        group by run_id order by run_id
        on conflict (run_id) do update set counts = jsonb_add_counts(c.counts, excluded.counts);
    elsif tg_op = 'UPDATE' then
        insert into run_block_counts as c (run_id, counts)
        select run_id, jsonb_object_agg(status, n)
        from (select run_id, status, sum(n) as n
              from (select run_id, status, count(*) as n from new_rows group by 1, 2
                    union all
                    select run_id, status, -count(*) from old_rows group by 1, 2) x
              group by 1, 2 having sum(n) <> 0) d
        group by run_id order by run_id
        on conflict (run_id) do update set counts = jsonb_add_counts(c.counts, excluded.counts);
    else
        update run_block_counts c set counts = jsonb_add_counts(c.counts, d.delta)
        from (select run_id, jsonb_object_agg(status, -n) as delta
              from (select run_id, status, count(*) as n from old_rows group by 1, 2) x
              group by run_id) d
        where c.run_id = d.run_id;
    end if;
    return null;
end $$;

drop trigger if exists overlays_count_insert on overlays;
create trigger overlays_count_insert after insert on overlays
    referencing new table as new_rows
    for each statement execute function run_block_counts_move();
drop trigger if exists overlays_count_update on overlays;
create trigger overlays_count_update after update on overlays
    referencing old table as old_rows new table as new_rows
    for each statement execute function run_block_counts_move();
drop trigger if exists overlays_count_delete on overlays;
create trigger overlays_count_delete after delete on overlays
    referencing old table as old_rows
    for each statement execute function run_block_counts_move();

-- The runs made before this migration: counted once, here.
insert into run_block_counts (run_id, counts)
select run_id, jsonb_object_agg(status, n)
from (select run_id, status, count(*) as n from overlays group by 1, 2) c
group by run_id
on conflict (run_id) do update set counts = excluded.counts;
