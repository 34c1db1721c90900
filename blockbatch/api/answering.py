"""Which endpoint would answer a run started from this process: the one whose earlier
answers the run may reuse (blockbatch/store/overlays.py ``reusable_answers``).

The live workers on the task queue say which endpoint they call (``worker_endpoints``,
blockbatch/runtime/endpoint.py); when none has said (a fleet still starting, workers
built in-process), the endpoint this process's settings point at, asked as a worker asks
it (activities/endpoint.py: one ``/health`` request, no prompt, no cost).
"""

from __future__ import annotations

import asyncpg

from activities.endpoint import ask_endpoint
from blockbatch.core.endpoint import Endpoint, answering, key_digest
from blockbatch.runtime.claude import anthropic_client
from blockbatch.runtime.settings import Settings
from blockbatch.store import workers

#: The endpoint a base URL and key answer as, once it answered (by base URL and key digest).
_own: dict[tuple[str | None, str | None], Endpoint] = {}


async def answering_endpoint(
    db: asyncpg.Pool | asyncpg.Connection, settings: Settings, task_queue: str | None = None
) -> Endpoint | None:
    """The endpoint (provider and host) a run on ``task_queue`` would be answered by;
    ``None`` when the live workers call different ones or no key is configured."""
    live = await workers.live(db, task_queue or settings.temporal_task_queue)
    if live:
        return answering(live)
    try:
        llm = anthropic_client(settings)
    except RuntimeError:  # a base URL without a key: nothing would answer
        return None
    which = (settings.resolved_anthropic_base_url, key_digest(llm.api_key))
    try:
        known = _own.get(which) or await ask_endpoint(llm)
    finally:
        await llm.close()
    if known is not None:
        _own[which] = known
    return known
