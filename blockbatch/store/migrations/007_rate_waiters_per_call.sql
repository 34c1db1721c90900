-- A run waits for the rate limiter while any of its calls waits: one row per waiting call
-- (``waiter``), not per run. With one row per run, the first of its calls admitted deleted
-- the row while its other calls still waited, and the run dropped out of the fair turn
-- until one of them asked again (BENCHMARKS 4d).
alter table rate_waiters add column waiter text not null default '';
alter table rate_waiters drop constraint rate_waiters_pkey;
alter table rate_waiters add primary key (key_hash, model, run_id, waiter);
