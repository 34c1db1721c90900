-- 010: incremental re-runs. A run reuses the model's earlier answer for every block whose
-- answer key matches an answered overlay of an earlier run instead of calling Claude
-- (core/reuse.py says what the key covers; store/overlays.py does the reuse).

-- Each block's content digest (core.reuse.block_digest: sha256 of its type, length-prefixed,
-- and its content), written at ingest. Blocks ingested before this migration get it here;
-- the expression is the same rule in SQL.
alter table blocks add column content_sha256 text;
update blocks set content_sha256 = encode(sha256(convert_to(
    length(block_type)::text || ':' || block_type || block_content, 'UTF8')), 'hex');
alter table blocks alter column content_sha256 set not null;

-- answer_key: what decides the model's answer for this block in this run (the block's
-- digest with the run's prompt digest); null for overlays planned before this migration.
-- model_answer: the model's answer as it staged it, kept when a person first edits staging
-- (null: staging is still the model's own). A reused overlay copies the model's answer,
-- never a reviewer's edit.
-- reused_from_run_id / reused_from_call_id: set on an overlay whose answer was reused: the
-- run and the ledger call that paid for it (the original ones, also when reused again).
alter table overlays add column answer_key text,
                     add column model_answer jsonb,
                     add column reused_from_run_id text,
                     add column reused_from_call_id bigint;

-- The reuse lookup: every answer key of a run's blocks in one index scan (= any of an
-- array), only over answers that may be reused (the model answered; nobody rejected it).
create index overlays_answer_key on overlays (answer_key)
    where status in ('ai_complete', 'confirmed') and answer_key is not null;

-- The run's counters: how many blocks were reused, and the reused blocks' share of what
-- their source calls cost (each call's cost over the blocks it carried).
alter table runs add column blocks_reused integer not null default 0,
                 add column reuse_saved_usd numeric(16, 6) not null default 0;
