-- 022: a person may reopen a confirmed block to correct it (confirmed -> ai_complete,
-- store/overlays.py reopen), recorded in review_actions like every other review act.
alter table review_actions drop constraint review_actions_action_check;
alter table review_actions add constraint review_actions_action_check
    check (action in ('edit', 'confirm', 'reject', 'reopen'));

-- The review page lists acts grouped as they were done (one bulk confirm of 10,000 blocks
-- is one line, so the edits before it stay in view: store/review.py review_activity):
-- grouped by the transaction's time, newest first, read off this index.
create index review_actions_run_at on review_actions (run_id, at, action, reviewer) include (id);
