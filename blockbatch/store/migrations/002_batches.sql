-- Provider batch mode (RunOptions.mode = 'batch'): Anthropic Message Batches, in rounds.
--
-- A round is a set of pack attempts submitted together (round 1: the planned packs;
-- round n + 1: the halves, retries and resubmissions that round n left). A round larger
-- than one provider batch may hold (100,000 requests / 256 MB) is submitted as several
-- parts, one provider batch each.

-- One row per provider batch. The row is inserted as 'submitting' (committed) before the
-- create call, so a crash between the call and the commit that records the batch id
-- leaves evidence: the retry then looks for the orphan batch instead of paying twice.
create table provider_batches (
    run_id              text not null references runs (run_id) on delete cascade,
    round               integer not null check (round >= 1),
    part                integer not null check (part >= 0),
    provider_batch_id   text unique,
    status              text not null check (status in
        ('submitting', 'in_progress', 'canceling', 'ended', 'not_submitted')),
    request_count       integer not null,
    request_bytes       bigint not null,
    processing          integer not null default 0,
    succeeded           integer not null default 0,
    errored             integer not null default 0,
    canceled            integer not null default 0,
    expired             integer not null default 0,
    submit_attempts     integer not null default 1,
    note                text,
    submit_started_at   timestamptz not null default now(),
    submitted_at        timestamptz,
    expires_at          timestamptz,
    cancel_requested_at timestamptz,
    ended_at            timestamptz,
    collected_at        timestamptz,
    primary key (run_id, round, part)
);

-- Round membership: which pack attempt each custom_id is, and what became of it.
create table batch_requests (
    run_id            text not null references runs (run_id) on delete cascade,
    custom_id         text not null,
    round             integer not null,
    pack_path         text not null,
    pack_index        integer not null,
    pack_attempt      integer not null,
    -- How many times this pack was resubmitted after an errored/expired/canceled result.
    resubmits         integer not null default 0,
    block_uids        text[] not null,
    max_tokens        integer not null,
    part              integer,
    provider_batch_id text,
    call_id           bigint references llm_calls (call_id),
    result_type       text check (result_type in
        ('succeeded', 'errored', 'expired', 'canceled', 'missing')),
    outcome           text,
    handled_at        timestamptz,
    created_at        timestamptz not null default now(),
    primary key (run_id, custom_id),
    unique (run_id, pack_path, pack_attempt)
);
create index batch_requests_round on batch_requests (run_id, round, pack_index, pack_path);

-- Ledger rows of batch requests say which batch and request they were.
alter table llm_calls add column provider_batch_id text, add column custom_id text;
