-- 003: honest outcomes. Every failed or cancelled block carries a machine-readable reason
-- code (core/reasons.py) next to its readable last_error; a run that finished says whether
-- every block is done, some failed, or nothing was done.
alter table overlays add column reason_code text;
create index overlays_run_reason on overlays (run_id, reason_code) where reason_code is not null;

alter table runs drop constraint runs_status_check;
alter table runs add constraint runs_status_check check (status in
    ('created', 'planning', 'running', 'cancelling', 'completed', 'completed_with_failures',
     'cancelled', 'failed'));
