-- The API's error.details.error_code of a failed call (a spend cap, a ramp limit, ...): the
-- ledger keeps what the classifier read, and a batch result line's code reaches the pack
-- policy the way a synchronous error's does (core.claude_errors.classify).
alter table llm_calls add column if not exists error_code text;
