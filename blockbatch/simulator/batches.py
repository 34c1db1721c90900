"""The Message Batches API: a store of batches, processed with the same engine.

A batch becomes ``ended`` ``processing_delay_s`` seconds after creation on the simulator's
clock (the wall clock, or a test's ``FakeClock``; checked lazily whenever it is looked at); only then is each request answered. Processing is taken
to advance evenly over that delay: a batch canceled after a share ``s`` of it keeps, and
bills, its first ``floor(s * n)`` requests as processed (``succeeded``, or ``errored`` /
``expired`` as drawn) and ends the rest ``canceled`` (contract §7, "a cancelled batch
ends ``ended`` with partial results").

Every request is validated against the ``anthropic-version`` of the batch's creation
(contract §4, "Where it applies"): at creation, a request that carries sampling
parameters under 2026-10-21, or ``max_tokens: 0`` (contract §5), fails the whole create
call with a 400 naming the request; the rest of a request's checks run when it is
processed and error only that request.

Batch requests see the cache like /v1/messages, but a hit is best-effort (contract §5,
"Batches": "30% to 98%"): a request that would read the cache does so with probability
``batch.warm_cache_hit_rate`` when its prefix was already cached as the batch began
processing (a pre-warm, an earlier batch), else ``batch.cache_hit_rate`` (a prefix the
batch writes itself: its requests run concurrently, and an entry is readable only once
the first response starts, contract §5). Each draw is the request's own seeded dice, so a
scenario's seed gives the same hits every time. A miss is answered against an empty
cache of its own, writing and paying its prefix, and the shared cache is left as it was.
No rate limits, no latency and no injected HTTP errors apply.

While a test holds answers back (``POST /_sim/hold``) no batch ends, however long ago it
was due: a test control, like the hold itself, so that a test can stop a worker while a
batch is still processing whatever the speed of the machine.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from blockbatch.simulator.cache import PromptCache
from blockbatch.simulator.engine import Engine, Outcome, Prepared
from blockbatch.simulator.errors import ApiError, error_body, invalid, new_id
from blockbatch.simulator.faults import Dice
from blockbatch.simulator.limits import rfc3339
from blockbatch.simulator.stats import Stats
from blockbatch.simulator.validate import ApiContext, check_sampling_shape

MAX_REQUESTS = 100_000
EXPIRY_S = 24 * 3600
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass
class BatchRecord:
    """One batch and, once ended, its results."""

    id: str
    created_at: float
    ready_at: float  # the engine's clock: when processing ends
    requests: list[dict[str, Any]]
    #: The version and betas of the create call, which every request is validated under.
    context: ApiContext = field(default_factory=lambda: ApiContext(batch=True))
    #: The engine's clock at creation: processing advances evenly until ``ready_at``.
    started: float = 0.0
    #: Requests processed before a cancel took effect.
    processed_on_cancel: int = 0
    status: str = "in_progress"
    cancel_initiated_at: float | None = None
    ended_at: float | None = None
    results: list[dict[str, Any]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
        if self.status != "ended":
            counts["processing"] = len(self.requests)
            return counts
        for line in self.results:
            counts[line["result"]["type"]] += 1
        return counts

    def to_json(self, base_url: str) -> dict[str, Any]:
        """The ``message_batch`` object; ``results_url`` points at this simulator."""
        ended = self.status == "ended"
        return {
            "id": self.id,
            "type": "message_batch",
            "processing_status": self.status,
            "request_counts": self.counts(),
            "ended_at": rfc3339(self.ended_at) if self.ended_at is not None else None,
            "created_at": rfc3339(self.created_at),
            "expires_at": rfc3339(self.created_at + EXPIRY_S),
            "cancel_initiated_at": (
                rfc3339(self.cancel_initiated_at) if self.cancel_initiated_at is not None else None
            ),
            "archived_at": None,
            "results_url": f"{base_url}/v1/messages/batches/{self.id}/results" if ended else None,
        }


def validate_batch_requests(body: Any, context: ApiContext | None = None) -> list[dict[str, Any]]:
    """Check the create body's ``requests``; return them.

    Args:
        body: the parsed create body.
        context: the create call's version and betas (``batch=True``).

    Raises:
        ApiError: 400 for a missing list, a bad or duplicate custom_id, too many requests,
            or a request the batch's API version refuses (named by its index).
    """
    context = context or ApiContext(batch=True)
    if not isinstance(body, dict) or "requests" not in body:
        raise invalid("requests: Field required")
    requests = body["requests"]
    if not isinstance(requests, list):
        raise invalid("requests: Input should be a valid list")
    if not requests:
        raise invalid("requests: List should have at least 1 item after validation, not 0")
    if len(requests) > MAX_REQUESTS:
        raise invalid(
            f"requests: List should have at most {MAX_REQUESTS} items after validation, "
            f"not {len(requests)}"
        )
    seen: set[str] = set()
    for index, item in enumerate(requests):
        if not isinstance(item, dict):
            raise invalid(f"requests.{index}: Input should be a valid dictionary")
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not _CUSTOM_ID.match(custom_id):
            raise invalid(
                f"requests.{index}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            )
        if custom_id in seen:
            raise invalid(f"requests: duplicate custom_id {custom_id!r}; each must be unique")
        seen.add(custom_id)
        params = item.get("params")
        if not isinstance(params, dict):
            raise invalid(f"requests.{index}.params: Field required")
        try:
            check_sampling_shape(params, context)
        except ApiError as error:
            raise invalid(f"requests.{index}.params.{error.message}") from None
        if params.get("max_tokens") == 0 and not isinstance(params.get("max_tokens"), bool):
            raise invalid(
                f"requests.{index}.params.max_tokens: 0 is not supported in a Message Batch"
            )
    return requests


class BatchStore:
    """All batches of this simulator, oldest first."""

    def __init__(
        self, engine: Engine, stats: Stats, held: Callable[[], bool] = lambda: False
    ) -> None:
        self._engine = engine
        self._stats = stats
        #: Whether a test holds answers back now: no batch ends meanwhile.
        self._held = held
        self._batches: dict[str, BatchRecord] = {}

    def clear(self) -> None:
        """Forget every batch."""
        self._batches.clear()

    def create(
        self, requests: list[dict[str, Any]], context: ApiContext | None = None
    ) -> BatchRecord:
        """A new ``in_progress`` batch, its requests to be validated under ``context``."""
        delay = self._engine.scenario.batch.processing_delay_s
        now = self._engine.clock()
        record = BatchRecord(
            id=new_id("msgbatch_"),
            created_at=now,
            ready_at=now + delay,
            requests=requests,
            context=replace(context or ApiContext(), batch=True),
            started=now,
        )
        self._batches[record.id] = record
        return record

    def get(self, batch_id: str) -> BatchRecord:
        """The batch, advanced to its current state.

        Raises:
            ApiError: 404 not_found_error for an unknown id.
        """
        record = self._batches.get(batch_id)
        if record is None:
            raise ApiError("not_found_error", f"message batch not found: {batch_id}")
        self._advance(record)
        return record

    def list(
        self, *, limit: int, after_id: str | None, before_id: str | None
    ) -> tuple[list[BatchRecord], bool]:
        """A page of batches, newest first, and whether more remain in that direction."""
        newest_first = list(reversed(self._batches.values()))
        ids = [r.id for r in newest_first]
        if after_id is not None:
            start = ids.index(after_id) + 1 if after_id in ids else len(ids)
            page = newest_first[start : start + limit]
            has_more = start + limit < len(ids)
        elif before_id is not None:
            end = ids.index(before_id) if before_id in ids else 0
            page = newest_first[max(0, end - limit) : end]
            has_more = end - limit > 0
        else:
            page, has_more = newest_first[:limit], len(ids) > limit
        for record in page:
            self._advance(record)
        return page, has_more

    def cancel(self, batch_id: str) -> BatchRecord:
        """Start canceling; an ended batch is returned unchanged."""
        record = self.get(batch_id)
        if record.status == "in_progress":
            record.status = "canceling"
            record.cancel_initiated_at = self._engine.clock()
            span = record.ready_at - record.started
            done = 1.0 if span <= 0 else min(1.0, (self._engine.clock() - record.started) / span)
            record.processed_on_cancel = math.floor(done * len(record.requests))
        return record

    def delete(self, batch_id: str) -> None:
        """Delete an ended batch.

        Raises:
            ApiError: 400 while the batch is still processing.
        """
        record = self.get(batch_id)
        if record.status != "ended":
            raise invalid(
                f"message batch {batch_id} cannot be deleted while it is processing; cancel it first"
            )
        del self._batches[batch_id]

    def _advance(self, record: BatchRecord) -> None:
        # What the cache held as processing began: a prefix in it is "warm" for the batch.
        warm = self._engine.cache.copy()
        if record.status == "canceling":
            done = record.processed_on_cancel
            record.results = [
                self._process(r, record.context, warm) for r in record.requests[:done]
            ]
            record.results += [
                {"custom_id": r["custom_id"], "result": {"type": "canceled"}}
                for r in record.requests[done:]
            ]
            self._end(record)
        elif (
            record.status == "in_progress"
            and self._engine.clock() >= record.ready_at
            and not self._held()
        ):
            record.results = [self._process(r, record.context, warm) for r in record.requests]
            self._end(record)

    def _end(self, record: BatchRecord) -> None:
        record.status = "ended"
        record.ended_at = self._engine.clock()
        self._stats.batch_results.update(line["result"]["type"] for line in record.results)

    def _process(
        self, request: dict[str, Any], context: ApiContext, warm: PromptCache
    ) -> dict[str, Any]:
        custom_id, params = request["custom_id"], request["params"]
        batch_settings = self._engine.scenario.batch
        dice = self._engine.dice_for(params)
        if dice.chance(batch_settings.expired_rate, "batch_expired"):
            return {"custom_id": custom_id, "result": {"type": "expired"}}
        try:
            if dice.chance(batch_settings.errored_rate, "batch_errored"):
                raise ApiError("api_error", "Internal server error (simulated)")
            prepared = self._engine.prepare(params, context=context)
        except ApiError as error:
            error_json = error_body(
                error.error_type, error.message, new_id("req_"), error.error_code
            )
            return {"custom_id": custom_id, "result": {"type": "errored", "error": error_json}}
        outcome = self._answer(prepared, dice, warm)
        self._stats.count_usage(outcome.usage, batch=True)
        self._stats.count_cache(eligible=outcome.cache.eligible, read=outcome.cache.read)
        self._stats.count_faults(outcome.faults)
        if outcome.quality is not None:
            self._stats.count_quality(
                outcome.quality.pack_size, outcome.quality.checked, outcome.quality.model
            )
        self._stats.stop_reasons[outcome.stop_reason] += 1
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": outcome.message}}

    def _answer(self, prepared: Prepared, dice: Dice, warm: PromptCache) -> Outcome:
        """Answer a batch request; a cache hit happens with ``batch.warm_cache_hit_rate``
        when ``warm`` (the cache as the batch began) already held the prefix, else with
        ``batch.cache_hit_rate``.

        A missed hit is answered against an empty cache of its own (the request ran where
        the prefix was not cached): it writes and pays the prefix, and the shared cache,
        which other requests read, is left as it was.
        """
        engine = self._engine
        model, prompt = prepared.model, prepared.prompt
        args = (model.id, prompt.breakpoints, model.min_cacheable_tokens)
        peek = engine.cache.lookup(*args, commit=False)
        settings = engine.scenario.batch
        was_warm = peek.read > 0 and warm.lookup(*args, commit=False).read > 0
        rate = settings.warm_cache_hit_rate if was_warm else settings.cache_hit_rate
        if peek.read == 0 or dice.chance(rate, "batch_cache_hit"):
            return engine.answer(prepared, dice, service_tier="batch")
        shared = engine.cache
        engine.cache = PromptCache(engine.clock)
        try:
            return engine.answer(prepared, dice, service_tier="batch")
        finally:
            engine.cache = shared
