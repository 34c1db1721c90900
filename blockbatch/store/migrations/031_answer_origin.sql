-- Where a run's reused answers came from (blockbatch/core/endpoint.py labels: ``anthropic``,
-- ``simulator 127.0.0.1:8765``): the endpoints of the calls that first paid for them. A
-- reused answer keeps its origin, so a run whose answers are all reused still says it is
-- simulated when the simulator gave them (blockbatch/store/reads.py unions these with the
-- endpoints of the run's own calls). Written by blockbatch/store/overlays.py insert_plan.
alter table runs add column if not exists reused_endpoints text[] not null default '{}';

-- Runs that reused answers before this column: the endpoint of the call each answer came
-- from, or, for an answer that names no call, the endpoints that answered its source run.
update runs r set reused_endpoints = array(
    select distinct e from (
        select c.provider || coalesce(' ' || c.endpoint_host, '') as e
        from overlays o join llm_calls c on c.call_id = o.reused_from_call_id
        where o.run_id = r.run_id
        union
        select c.provider || coalesce(' ' || c.endpoint_host, '')
        from overlays o join llm_calls c on c.run_id = o.reused_from_run_id
        where o.run_id = r.run_id and o.reused_from_call_id is null
          and c.status = 'succeeded' and c.purpose <> 'warm_up'
    ) t order by 1)
where r.blocks_reused > 0;

-- Duplicates within a run: a block whose answer key an earlier block of the same run has
-- is not packed; it waits (``pending`` in no pack) for that block's outcome, named here,
-- and takes it when it lands (blockbatch/store/overlays.py, the "follows" transitions).
alter table overlays add column if not exists same_as text;

-- The block a follower waits for ends (answered, failed or cancelled): every follower
-- still pending takes the same outcome, in the same statement's transaction, so no
-- follower is left waiting and none is asked.
create or replace function overlays_follow() returns trigger language plpgsql as $$
begin
    update overlays f
       set status = new.status, staging = new.staging, evidence = new.evidence,
           reason_code = new.reason_code, last_error = new.last_error,
           call_id = new.call_id, pack_path = new.pack_path, updated_at = now()
     where f.run_id = new.run_id and f.same_as = new.block_uid and f.status = 'pending';
    return null;
end $$;

drop trigger if exists overlays_follow on overlays;
create trigger overlays_follow after update of status on overlays
    for each row
    when (old.status = 'pending' and new.status in ('ai_complete', 'failed', 'cancelled'))
    execute function overlays_follow();
