"""The pure core of blockbatch: models, schema, ingest, planning, prompt, results, policy.

No I/O here: nothing imports asyncpg, anthropic, a Temporal client or a layer above.
"""
