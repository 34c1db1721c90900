-- 011: a budget that holds (RunOptions.max_cost_usd, core/budget.py). A run whose budget ran
-- out ends `budget_exhausted`; every Claude call of a budgeted run records the worst case it
-- reserved against the budget while it was open (store/ledger.py open_call, open_probe).
alter table runs drop constraint runs_status_check;
alter table runs add constraint runs_status_check check (status in
    ('created', 'planning', 'running', 'cancelling', 'completed', 'completed_with_failures',
     'cancelled', 'failed', 'budget_exhausted'));

-- The worst case (USD) a call of a budgeted run reserved: it counts against the budget while
-- the call is open (started) or was lost with its worker (abandoned: it may have been paid);
-- once the answer or error is recorded, its real cost_usd counts instead. Null: no budget.
alter table llm_calls add column reserved_usd numeric(12, 6);
