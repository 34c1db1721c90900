-- Streams (issue #16): a run whose document grows while it runs. Rows are appended as
-- blocks of a document of kind 'stream' (pending overlays in no pack yet); the
-- StreamWorkflow gives the oldest of them a pack when a trigger fires.
alter table documents add column kind text not null default 'document'
    check (kind in ('document', 'stream'));
-- A stream's document starts empty; an ingested document still has a block at least.
alter table documents drop constraint documents_block_count_check;
alter table documents add constraint documents_block_count_check
    check (block_count > 0 or kind = 'stream');

-- A stream row: when it was accepted (the max-wait trigger) and the producer's key for
-- it (a row put again under the same key is the row already accepted: a producer that
-- restarts re-puts nothing twice).
alter table blocks add column accepted_at timestamptz;
alter table blocks add column stream_key text;
create unique index blocks_stream_key on blocks (document_id, stream_key)
    where stream_key is not null;

create table streams (
    run_id       text primary key references runs (run_id) on delete cascade,
    document_id  text not null references documents (document_id),
    -- core.streams.StreamTriggers: max_rows, max_tokens, max_wait_s, max_buffered.
    triggers     jsonb not null,
    -- The JSON field of a row that holds its text.
    text_field   text not null default 'text',
    -- Rows accepted so far (the next row's block_index).
    rows         integer not null default 0,
    created_at   timestamptz not null default now(),
    -- Set once by close(): no row is accepted after it; the workflow drains and ends.
    closed_at    timestamptz
);
-- The workflow's look at what is buffered: pending rows of the run in no pack yet.
create index overlays_unpacked on overlays (run_id, block_index)
    where pack_index is null and status = 'pending';
