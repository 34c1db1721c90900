-- 021: the fleet limiter by the current contract (core/ratelimit.py). A fourth bucket for
-- anthropic-ratelimit-tokens-* (the most restrictive token limit in force, input plus
-- output); the ramp share of the minute capacity and when a call was last admitted (an
-- idle limiter ramps up again); the learned share of max_tokens that answers write (OTPM counts actual output). The ``model`` column holds the
-- rate-limit class (core.ratelimit.rate_class) from now on: rows keyed by a model id are
-- left to age out.
alter table rate_limiters
    add column tokens_limit bigint not null default 240000000,
    add column tokens_level double precision not null default 240000000,
    add column ramp double precision not null default 1,
    add column last_admit_at double precision not null default 0,
    add column output_share double precision not null default 1;
