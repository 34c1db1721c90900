-- Evidence (prompt_config.evidence, blockbatch/core/evidence.py): per field of the model's
-- answer, the quote it gave and where that quote is in the block's content:
-- {field: {quote, match: exact|normalised|missing, start, end, reason}}; null when the run's
-- schema asks for none. Written with the staged answer (apply_answer) and kept with it; a
-- value whose quote is missing flags the overlay reason_code 'ungrounded' (a review flag on
-- an ai_complete overlay, not a failure), so the review grid's reason filter lists them
-- through migration 009's index overlays (run_id, reason_code, block_index).
alter table overlays add column if not exists evidence jsonb;
-- The quality probe's single answer of a sampled block, grounded the same way: the summary
-- sets the sampled blocks' grounding packed beside their grounding alone.
alter table quality_samples add column if not exists evidence jsonb;
