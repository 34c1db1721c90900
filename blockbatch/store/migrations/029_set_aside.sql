-- 029: blocks set aside. Ingest types some blocks as kept but not sent (running headers and
-- footers, page numbers, off-page and invisible text, a web page's navigation:
-- blockbatch/core/blocks.py SET_ASIDE_TYPES). A run that does not include them gives each
-- such block an overlay of its own terminal status, set_aside: in no pack, never called,
-- not a failure. The run counts them apart, with what sending them was estimated to cost.
alter table overlays drop constraint overlays_status_check;
alter table overlays add constraint overlays_status_check check (status in
    ('pending', 'ai_complete', 'failed', 'cancelled', 'confirmed', 'rejected', 'set_aside'));

alter table runs add column blocks_set_aside integer not null default 0,
                 add column set_aside_usd numeric(14, 6) not null default 0;
