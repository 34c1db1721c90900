-- 009: review. A person edits staged values, confirms or rejects blocks (starter.py edit /
-- confirm / reject, the API, the review web app), and every one of those acts is recorded:
-- who, when, what it was before and what it is after. store/overlays.py writes the overlay
-- and its review_actions row in one transaction, so neither exists without the other.

-- A person may reject an AI result: ai_complete -> rejected (staging kept, nothing confirmed).
alter table overlays drop constraint overlays_status_check;
alter table overlays add constraint overlays_status_check check (status in
    ('pending', 'ai_complete', 'failed', 'cancelled', 'confirmed', 'rejected'));

create table review_actions (
    id         bigserial primary key,
    run_id     text not null references runs (run_id) on delete cascade,
    block_uid  text not null,
    -- edit: one staged field changed; confirm: staging copied to confirmed; reject.
    action     text not null check (action in ('edit', 'confirm', 'reject')),
    reviewer   text not null check (reviewer <> ''),
    at         timestamptz not null default now(),
    -- edit only: the field changed.
    field      text,
    -- edit: the field's value before and after; confirm: the confirmed overlay before
    -- (null) and after; reject: the staged overlay before, and null after.
    before     jsonb,
    after      jsonb,
    old_status text not null,
    new_status text not null,
    check ((action = 'edit') = (field is not null))
);
create index review_actions_block on review_actions (run_id, block_uid, id);
create index review_actions_run on review_actions (run_id, id);

-- The review grid pages by block_index (keyset) within a filter; these keep each filter an
-- index range scan at 100,000 blocks (bench/review_page.py); they replace the narrower
-- status and reason indexes of 001 and 003.
create index overlays_run_status_index on overlays (run_id, status, block_index);
drop index overlays_run_status;
create index overlays_run_reason_index on overlays (run_id, reason_code, block_index)
    where reason_code is not null;
drop index overlays_run_reason;
create index blocks_document_type_index on blocks (document_id, block_type, block_index);
