"""The Models API at run time: ``GET /v1/models/{id}`` read through the SDK, kept in Postgres.

What the API says of a model (its limits, capabilities, lifecycle and ``retires_at``)
overrides the registry for a run (``blockbatch.core.run_model``); contract §1, "Check at run time".
It is read only where a run starts (``Blockbatch.start_run``, ``open_stream``, ``escalate``
and ``estimate``, when they have API credentials): kept in ``model_facts`` and read again
once older than ``blockbatch.core.run_model.FACTS_MAX_AGE_S``. The models a run uses are
resolved there once and kept with the run (``blockbatch.store.runs.save_models``); workers
read them from the run and never call the Models API.

An API that does not offer the endpoint (404 or 405), or does not answer, leaves the
registry as it is: the facts are an improvement, never a condition for running. The
answer never carries a secret (the key stays in the client).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import asyncpg

from blockbatch.core.run_model import FACTS_MAX_AGE_S
from blockbatch.send.sdk import anthropic
from blockbatch.store import model_facts

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

log = logging.getLogger(__name__)

#: After a read that got nothing (no endpoint, no answer), this process does not ask
#: again for this long: a run's calls must not each wait for an endpoint that is not there.
RETRY_AFTER_S = 600.0
#: Seconds one read may take.
READ_TIMEOUT_S = 10.0


class ModelFacts:
    """Reads and keeps what the Models API says of models, through one anthropic client.

    Args:
        client: the anthropic client (the worker's, or the front door's own).
        max_age_s: facts older than this are read again.
    """

    def __init__(self, client: AsyncAnthropic, *, max_age_s: float = FACTS_MAX_AGE_S) -> None:
        self.client = client
        self.max_age_s = max_age_s
        #: Model id -> when a read last got nothing (monotonic seconds).
        self._missed: dict[str, float] = {}

    async def fetch(self, model_id: str) -> dict[str, Any] | None:
        """``GET /v1/models/{model_id}`` as JSON; ``None`` when the API has no answer.

        A 404 (no such endpoint, or a model the API does not describe), a 405, any other
        error answer and no answer at all give ``None``: the registry stands.
        """
        try:
            info = await self.client.models.retrieve(model_id, timeout=READ_TIMEOUT_S)
        except anthropic.APIStatusError as err:
            log.info(
                "Models API: %s answered %s for %s; the registry stands",
                "GET /v1/models/{id}",
                err.status_code,
                model_id,
            )
            return None
        except anthropic.APIError as err:  # no answer: connection refused, timed out
            log.info(
                "Models API: no answer for %s (%s); the registry stands",
                model_id,
                type(err).__name__,
            )
            return None
        facts: dict[str, Any] = info.model_dump(mode="json", exclude_none=True)
        return facts

    async def refresh(
        self, conn: asyncpg.Connection | asyncpg.Pool, model_id: str
    ) -> dict[str, Any] | None:
        """The fresh facts of ``model_id``: kept ones younger than ``max_age_s``, else read
        from the API and kept; ``None`` when there are none (the registry stands)."""
        kept = await model_facts.fresh(conn, model_id, self.max_age_s)
        if kept is not None:
            return kept
        missed = self._missed.get(model_id)
        if missed is not None and time.monotonic() - missed < RETRY_AFTER_S:
            return None
        facts = await self.fetch(model_id)
        if not facts:
            self._missed[model_id] = time.monotonic()
            return None
        self._missed.pop(model_id, None)
        await model_facts.save(conn, model_id, facts)
        return facts
