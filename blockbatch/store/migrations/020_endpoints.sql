-- 020: which Claude endpoint answered, and the counted size of a prompt prefix (issue 28).
--
-- llm_calls.provider (004) now says who answered: 'anthropic' (the Claude API) or
-- 'simulator' (the local simulated Claude, which says so in a response header);
-- endpoint_host is the base URL's host[:port] when it is not Anthropic's own
-- (api.anthropic.com: null). A run's endpoints are read from its calls (store/reads.py).
alter table llm_calls add column endpoint_host text;

-- The prefix's input tokens as the API counts them (system prompt and tools, cached or
-- not): the "one call per block, no caching" baseline prices every block with it. Written
-- once, from a cached call's cache write + read or from a token count; null until then.
alter table prompt_prefixes add column input_tokens integer;

-- What the API did with a prefix before (read or wrote it, or neither): the probe's cost
-- cap prices a prefix as a cache read only when it is cached (core.quality).
create index llm_calls_prefix on llm_calls (prefix_sha256) where prefix_sha256 is not null;

-- The endpoint each live worker calls (no secrets: the host and a short hash of the key),
-- so a starter whose own Claude settings differ can warn before it starts a run. A worker
-- writes its row at start-up, refreshes seen_at while it runs and deletes it on shutdown.
create table worker_endpoints (
    worker_id      text primary key,
    task_queue     text not null,
    provider       text not null check (provider in ('anthropic', 'simulator')),
    endpoint_host  text,
    key_sha256     text,
    started_at     timestamptz not null default now(),
    seen_at        timestamptz not null default now()
);
create index worker_endpoints_queue on worker_endpoints (task_queue, seen_at);
