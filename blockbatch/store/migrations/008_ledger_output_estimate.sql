-- What the planner expected a pack call to write: a run compares it with what its answers
-- really wrote and sizes the max_tokens of its next calls from that (issue #13: the API
-- holds max_tokens against the output-tokens-per-minute limit while a call runs).
alter table llm_calls add column est_output_tokens integer;
