-- Short ids on the wire (issue 14): a pack call names its blocks b1, b2, ... instead of their
-- block_uids. The map alias -> block_uid is decided before the call and kept with its ledger
-- row; an answer is mapped back through this record only. Null: the call named its blocks by
-- block_uid (every call recorded before this migration, and runs with short_ids off).
alter table llm_calls add column block_aliases jsonb;
