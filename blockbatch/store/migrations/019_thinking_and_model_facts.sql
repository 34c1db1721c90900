-- 019: thinking tokens in the ledger and the run totals; the Models API's facts (issue #24).
--
-- llm_calls.thinking_tokens: of output_tokens, how many were thinking
-- (usage.output_tokens_details.thinking_tokens, contract §3): billed as output all the
-- same, and counted against max_tokens, so runs learn how much their calls think.
alter table llm_calls add column thinking_tokens integer not null default 0;
alter table runs add column thinking_tokens bigint not null default 0;

-- model_facts: what GET /v1/models/{id} said of a model (limits, capabilities,
-- lifecycle, retires_at), as the API wrote it, and when it was read. A run's model is the
-- registry's entry with fresh facts taking over (core.registry.with_api_facts).
create table model_facts (
    model_id    text primary key,
    facts       jsonb not null,
    fetched_at  timestamptz not null default now()
);
