-- The models a run uses, resolved once where it starts (blockbatch/api: the registry, the
-- Models API's facts, configured prices) and kept with it: ``{model id: ModelInfo as JSON}``
-- (blockbatch/core/run_model.py model_json). The run's model and its quality probe's are
-- written by start_run; an escalation's model when the escalation starts. Workers read them
-- here (blockbatch/store/runs.py) and never ask the Models API themselves. A run started
-- before this column has none: its workers fall back to the registry and the kept facts.
alter table runs add column if not exists models jsonb not null default '{}';
