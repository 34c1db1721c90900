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
