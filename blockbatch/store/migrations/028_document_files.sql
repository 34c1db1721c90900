-- The source file of a paged document (PDF), kept so the review app can show a block's page
-- with its box (blockbatch/web/app.py). Written with the document, in one transaction
-- (blockbatch/store/repo.py save_document); a file above repo.MAX_STORED_FILE_BYTES is not
-- kept, and its blocks show no page. PDFs are compressed already: the bytes are stored out
-- of line without a second, pointless compression.
create table if not exists document_files (
    document_id text primary key references documents (document_id) on delete cascade,
    format      text not null,
    bytes       bytea not null,
    size_bytes  integer not null,
    stored_at   timestamptz not null default now()
);
alter table document_files alter column bytes set storage external;
