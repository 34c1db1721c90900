-- 006: one rate limiter for the whole fleet (core/ratelimit.py, store/ratelimits.py).
-- One row per API key (sha256 prefix, never the key) and model: the API's three token
-- buckets as the fleet sees them, their learned limits and the AIMD factor. Times are epoch
-- seconds of the database clock, so workers with skewed clocks agree.
create table rate_limiters (
    key_hash       text not null,
    model          text not null,
    requests_limit integer not null,
    input_limit    integer not null,
    output_limit   integer not null,
    requests_level double precision not null,
    input_level    double precision not null,
    output_level   double precision not null,
    at             double precision not null,
    factor         double precision not null default 1,
    last_cut_at    double precision not null default 0,
    learned_at     timestamptz,
    admitted       bigint not null default 0,
    throttled      bigint not null default 0,
    primary key (key_hash, model)
);

-- What each admitted call reserved, and (once settled) what it used. A reservation whose
-- worker died is never settled: the buckets refill on their own, so it costs the fleet one
-- refill at most. Rows of the last minutes tell each run's share and calls in flight.
create table rate_reservations (
    reservation_id bigserial primary key,
    key_hash       text not null,
    model          text not null,
    run_id         text,
    requests       integer not null,
    input_tokens   integer not null,
    output_tokens  integer not null,
    created_at     timestamptz not null default now(),
    expires_at     timestamptz not null,
    settled_at     timestamptz
);
create index rate_reservations_recent on rate_reservations (key_hash, model, created_at);

-- Runs waiting for the limiter right now (seen within seconds), with their weight: who is
-- served next when capacity frees up (the least served per weight).
create table rate_waiters (
    key_hash   text not null,
    model      text not null,
    run_id     text not null,
    weight     double precision not null default 1,
    seen_at    timestamptz not null default now(),
    primary key (key_hash, model, run_id)
);
