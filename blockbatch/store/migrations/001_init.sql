-- blockbatch data model: documents, blocks, schemas, runs, overlays, the LLM call ledger.

create table documents (
    document_id    text primary key,
    name           text not null,
    format         text not null,
    content_sha256 text not null,
    block_count    integer not null check (block_count > 0),
    created_at     timestamptz not null default now()
);

create table blocks (
    block_uid     text primary key,
    document_id   text not null references documents (document_id) on delete cascade,
    block_index   integer not null,
    block_type    text not null,
    block_content text not null,
    metadata      jsonb not null default '{}',
    est_tokens    integer not null,
    unique (document_id, block_index)
);

create table schemas (
    schema_id      text primary key,
    name           text not null,
    definition     jsonb not null,
    content_sha256 text not null unique,
    created_at     timestamptz not null default now()
);

create table runs (
    run_id                      text primary key,
    document_id                 text not null references documents (document_id),
    schema_id                   text not null references schemas (schema_id),
    model                       text not null,
    status                      text not null default 'created' check (status in
        ('created', 'planning', 'running', 'cancelling', 'completed', 'cancelled', 'failed')),
    settings                    jsonb not null default '{}',
    workflow_id                 text,
    error                       text,
    cancel_requested_at         timestamptz,
    blocks_total                integer not null default 0,
    blocks_ai_complete          integer not null default 0,
    blocks_failed               integer not null default 0,
    blocks_cancelled            integer not null default 0,
    blocks_confirmed            integer not null default 0,
    pack_count                  integer not null default 0,
    calls                       integer not null default 0,
    split_events                integer not null default 0,
    input_tokens                bigint not null default 0,
    output_tokens               bigint not null default 0,
    cache_creation_input_tokens bigint not null default 0,
    cache_read_input_tokens     bigint not null default 0,
    cost_usd                    numeric(16, 6) not null default 0,
    created_at                  timestamptz not null default now(),
    started_at                  timestamptz,
    finished_at                 timestamptz
);

-- One row per run x block: the plan (pack_index) and the result.
create table overlays (
    run_id        text not null references runs (run_id) on delete cascade,
    block_uid     text not null references blocks (block_uid),
    block_index   integer not null,
    pack_index    integer,
    status        text not null default 'pending' check (status in
        ('pending', 'ai_complete', 'failed', 'cancelled', 'confirmed')),
    staging       jsonb,
    confirmed     jsonb,
    attempt_count integer not null default 0,
    last_error    text,
    pack_path     text,
    call_id       bigint,
    updated_at    timestamptz not null default now(),
    confirmed_at  timestamptz,
    primary key (run_id, block_uid)
);
create index overlays_run_pack on overlays (run_id, pack_index, block_index);
create index overlays_run_status on overlays (run_id, status);
create index overlays_run_index on overlays (run_id, block_index);

-- Request prefixes shared by every call of a run (system prompt + tool), stored once.
create table prompt_prefixes (
    sha256     text primary key,
    system     jsonb not null,
    tools      jsonb not null,
    created_at timestamptz not null default now()
);

-- The LLM call ledger: every request sent and every raw response or error received.
create table llm_calls (
    call_id                     bigserial primary key,
    run_id                      text not null references runs (run_id) on delete cascade,
    pack_path                   text not null,
    pack_attempt                integer not null,
    block_uids                  text[] not null,
    model                       text not null,
    prefix_sha256               text references prompt_prefixes (sha256),
    request                     jsonb not null,
    status                      text not null check (status in
        ('started', 'succeeded', 'failed', 'abandoned')),
    response                    jsonb,
    http_status                 integer,
    error_type                  text,
    error_message               text,
    request_id                  text,
    stop_reason                 text,
    input_tokens                integer not null default 0,
    output_tokens               integer not null default 0,
    cache_creation_input_tokens integer not null default 0,
    cache_read_input_tokens     integer not null default 0,
    cache_creation_1h_tokens    integer not null default 0,
    cost_usd                    numeric(16, 8) not null default 0,
    latency_ms                  integer,
    workflow_id                 text,
    workflow_run_id             text,
    activity_id                 text,
    activity_attempt            integer,
    apply_outcome               jsonb,
    applied_at                  timestamptz,
    started_at                  timestamptz not null default now(),
    finished_at                 timestamptz
);
create index llm_calls_run on llm_calls (run_id, pack_path, pack_attempt);
-- Pay once: at most one answered call per pack attempt.
create unique index llm_calls_one_success on llm_calls (run_id, pack_path, pack_attempt)
    where status = 'succeeded';

-- A pack that was halved: which blocks, why, into which children.
create table split_events (
    run_id      text not null references runs (run_id) on delete cascade,
    pack_path   text not null,
    reason      text not null,
    block_count integer not null,
    child_paths text[] not null,
    created_at  timestamptz not null default now(),
    primary key (run_id, pack_path)
);
