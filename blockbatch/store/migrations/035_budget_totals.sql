-- 035: budgets that spend what they are given (issue 37), read in constant time.
--
-- A call of a budgeted run reserves what it is expected to cost plus a margin sized from the
-- run's spread (core/budget.py ``reservation``), no longer its worst case: each call keeps
-- both figures, and the worst case is what a call lost with its worker counts (it may have
-- been paid in full).
alter table llm_calls add column expected_usd numeric(12, 6);
alter table llm_calls add column worst_usd numeric(12, 6);

-- One row per run with a ledger: the running totals the budget and the learned output read
-- (store/ledger.py ``budget_use``, ``observed_output``) instead of summing every call of the
-- run on every call. Kept by the statement triggers below, in the transaction that writes
-- the ledger rows, whichever module writes them (sync calls, batch requests, probes).
create table run_ledger_totals (
    run_id            text primary key references runs (run_id) on delete cascade,
    -- What counts against a budget: settled calls at their cost, a call lost with its
    -- worker (abandoned) at the most it may have cost; and what open calls reserve.
    recorded_usd      numeric(20, 8) not null default 0,
    open_reserved_usd numeric(20, 8) not null default 0,
    -- Answered pack calls that wrote a full answer (not cut at max_tokens), their blocks,
    -- answer tokens written (thinking left out) and estimated.
    full_calls        bigint not null default 0,
    full_blocks       bigint not null default 0,
    written_tokens    bigint not null default 0,
    est_tokens        bigint not null default 0,
    -- Every answered pack call, and the thinking tokens they wrote.
    answered_calls    bigint not null default 0,
    thinking_tokens   bigint not null default 0,
    -- Answered pack calls reserved at an expected cost: their count and the sums of
    -- cost / expected and of its square (the spread a reservation's margin is sized from).
    expected_calls    bigint not null default 0,
    cost_ratio_sum    float8 not null default 0,
    cost_ratio_sq_sum float8 not null default 0,
    -- The last time an answer of the run read or wrote its prompt prefix in the cache.
    prefix_cached_at  timestamptz
);

-- A row's part in the totals; a statement adds its new rows' parts and takes away its old
-- rows' (an update does both).
create function ledger_parts(rows_ llm_calls[])
returns table (run_id text, recorded numeric, open_reserved numeric, full_calls bigint,
               full_blocks bigint, written bigint, est bigint, answered bigint,
               thinking bigint, expected_calls bigint, ratio float8, ratio_sq float8,
               cached_at timestamptz)
language sql stable as $$
    select c.run_id,
           sum(case when c.status = 'started' then 0
                    when c.status = 'abandoned'
                        then greatest(c.cost_usd, coalesce(c.worst_usd, 0),
                                      coalesce(c.reserved_usd, 0))
                    else c.cost_usd end),
           sum(case when c.status = 'started' then coalesce(c.reserved_usd, 0) else 0 end),
           count(*) filter (where c.full_answer),
           coalesce(sum(cardinality(c.block_uids)) filter (where c.full_answer), 0),
           coalesce(sum(c.output_tokens - c.thinking_tokens) filter (where c.full_answer), 0),
           coalesce(sum(c.est_output_tokens) filter (where c.full_answer), 0),
           count(*) filter (where c.answered),
           coalesce(sum(c.thinking_tokens) filter (where c.answered), 0),
           count(*) filter (where c.answered and c.expected_usd > 0),
           coalesce(sum(c.cost_usd / c.expected_usd)
                        filter (where c.answered and c.expected_usd > 0), 0)::float8,
           coalesce(sum((c.cost_usd / c.expected_usd) ^ 2)
                        filter (where c.answered and c.expected_usd > 0), 0)::float8,
           max(c.finished_at) filter (where c.status = 'succeeded'
               and c.cache_creation_input_tokens + c.cache_read_input_tokens > 0)
    from (select r.*,
                 r.purpose = 'pack' and r.status = 'succeeded' as answered,
                 r.purpose = 'pack' and r.status = 'succeeded' and r.est_output_tokens > 0
                     and r.stop_reason is distinct from 'max_tokens' as full_answer
          from unnest(rows_) r) c
    group by c.run_id
$$;

create function ledger_totals_apply(added llm_calls[], taken llm_calls[])
returns void language sql as $$
    insert into run_ledger_totals as t (run_id, recorded_usd, open_reserved_usd, full_calls,
        full_blocks, written_tokens, est_tokens, answered_calls, thinking_tokens,
        expected_calls, cost_ratio_sum, cost_ratio_sq_sum, prefix_cached_at)
    select d.run_id, sum(d.sign * d.recorded), sum(d.sign * d.open_reserved),
           sum(d.sign * d.full_calls), sum(d.sign * d.full_blocks), sum(d.sign * d.written),
           sum(d.sign * d.est), sum(d.sign * d.answered), sum(d.sign * d.thinking),
           sum(d.sign * d.expected_calls), sum(d.sign * d.ratio), sum(d.sign * d.ratio_sq),
           max(d.cached_at) filter (where d.sign > 0)
    from (select 1 as sign, p.* from ledger_parts(added) p
          union all
          select -1, p.* from ledger_parts(taken) p) d
    -- A run whose rows are being deleted with it has no totals row to keep.
    where exists (select 1 from runs r where r.run_id = d.run_id)
    group by d.run_id
    on conflict (run_id) do update set
        recorded_usd = t.recorded_usd + excluded.recorded_usd,
        open_reserved_usd = t.open_reserved_usd + excluded.open_reserved_usd,
        full_calls = t.full_calls + excluded.full_calls,
        full_blocks = t.full_blocks + excluded.full_blocks,
        written_tokens = t.written_tokens + excluded.written_tokens,
        est_tokens = t.est_tokens + excluded.est_tokens,
        answered_calls = t.answered_calls + excluded.answered_calls,
        thinking_tokens = t.thinking_tokens + excluded.thinking_tokens,
        expected_calls = t.expected_calls + excluded.expected_calls,
        cost_ratio_sum = t.cost_ratio_sum + excluded.cost_ratio_sum,
        cost_ratio_sq_sum = t.cost_ratio_sq_sum + excluded.cost_ratio_sq_sum,
        prefix_cached_at = greatest(t.prefix_cached_at, excluded.prefix_cached_at)
$$;

create function ledger_totals_insert() returns trigger language plpgsql as $$
begin
    perform ledger_totals_apply((select array_agg(n::llm_calls) from new_rows n), '{}');
    return null;
end $$;

-- Only rows whose part may have changed: applying an answer or renaming nothing leaves the
-- run's totals row unlocked.
create function ledger_totals_update() returns trigger language plpgsql as $$
declare
    added llm_calls[];
    taken llm_calls[];
begin
    select array_agg(n::llm_calls), array_agg(o::llm_calls) into added, taken
    from new_rows n join old_rows o on o.call_id = n.call_id
    where (o.status, o.cost_usd, o.reserved_usd, o.worst_usd, o.expected_usd, o.purpose,
           o.output_tokens, o.thinking_tokens, o.est_output_tokens, o.stop_reason,
           o.finished_at, o.block_uids, o.cache_creation_input_tokens,
           o.cache_read_input_tokens, o.run_id)
          is distinct from
          (n.status, n.cost_usd, n.reserved_usd, n.worst_usd, n.expected_usd, n.purpose,
           n.output_tokens, n.thinking_tokens, n.est_output_tokens, n.stop_reason,
           n.finished_at, n.block_uids, n.cache_creation_input_tokens,
           n.cache_read_input_tokens, n.run_id);
    if added is not null then
        perform ledger_totals_apply(added, taken);
    end if;
    return null;
end $$;

create function ledger_totals_delete() returns trigger language plpgsql as $$
begin
    perform ledger_totals_apply('{}', (select array_agg(o::llm_calls) from old_rows o));
    return null;
end $$;

create trigger llm_calls_totals_insert after insert on llm_calls
    referencing new table as new_rows for each statement execute function ledger_totals_insert();
create trigger llm_calls_totals_update after update on llm_calls
    referencing old table as old_rows new table as new_rows
    for each statement execute function ledger_totals_update();
create trigger llm_calls_totals_delete after delete on llm_calls
    referencing old table as old_rows for each statement execute function ledger_totals_delete();

-- The runs that already have a ledger.
select ledger_totals_apply(array(select c from llm_calls c), '{}');
