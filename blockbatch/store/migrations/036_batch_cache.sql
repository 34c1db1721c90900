-- 036: batch rounds' prompt cache (issue 37).
--
-- How each round uses the prompt cache (core/batching.py ``round_cache``), decided once
-- and kept, so the pre-warm, the submission and a retried activity agree; and whether the
-- prefix was cached when the round was submitted (a pre-warm or an earlier call wrote or
-- read it), so the measured batch hit rate counts only requests sent on a warm prefix.
create table batch_rounds (
    run_id         text not null references runs (run_id) on delete cascade,
    round          integer not null check (round >= 1),
    cache_plan     text not null check (cache_plan in ('lead', 'pre-warm', 'read', 'write', 'none')),
    warm_at_submit boolean,
    primary key (run_id, round)
);

-- Per model, the batch requests sent with cache_control on a prefix cached before their
-- batch was submitted, and how many of them read it: counted once per provider batch as
-- its results are collected (store/batches.py ``count_cache_hits``), read in constant time
-- by the quote and the round planning (``batch_cache_hits``).
create table batch_cache_hits (
    model    text primary key,
    requests bigint not null default 0,
    reads    bigint not null default 0
);
