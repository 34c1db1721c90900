"""The Message Batches API: a store of batches, processed with the same engine.

A batch becomes ``ended`` ``processing_delay_s`` real seconds after creation (checked
lazily whenever it is looked at); only then is each request answered, so a batch
canceled before that ends with every request ``canceled``. Batch requests see the
cache like /v1/messages but no rate limits, no latency and no injected HTTP errors.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from simulator.engine import Engine
from simulator.errors import ApiError, error_body, invalid, new_id
from simulator.limits import rfc3339
from simulator.stats import Stats

MAX_REQUESTS = 100_000
EXPIRY_S = 24 * 3600
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass
class BatchRecord:
    """One batch and, once ended, its results."""

    id: str
    created_at: float
    ready_at: float  # time.monotonic() deadline
    requests: list[dict[str, Any]]
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


def validate_batch_requests(body: Any) -> list[dict[str, Any]]:
    """Check the create body's ``requests``; return them.

    Raises:
        ApiError: 400 for a missing list, a bad or duplicate custom_id, too many requests.
    """
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
        if not isinstance(item.get("params"), dict):
            raise invalid(f"requests.{index}.params: Field required")
    return requests


class BatchStore:
    """All batches of this simulator, oldest first."""

    def __init__(self, engine: Engine, stats: Stats) -> None:
        self._engine = engine
        self._stats = stats
        self._batches: dict[str, BatchRecord] = {}

    def clear(self) -> None:
        """Forget every batch."""
        self._batches.clear()

    def create(self, requests: list[dict[str, Any]]) -> BatchRecord:
        """A new ``in_progress`` batch."""
        delay = self._engine.scenario.batch.processing_delay_s
        record = BatchRecord(
            id=new_id("msgbatch_"),
            created_at=self._engine.clock(),
            ready_at=time.monotonic() + delay,
            requests=requests,
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
        if record.status == "canceling":
            record.results = [
                {"custom_id": r["custom_id"], "result": {"type": "canceled"}}
                for r in record.requests
            ]
            self._end(record)
        elif record.status == "in_progress" and time.monotonic() >= record.ready_at:
            record.results = [self._process(r) for r in record.requests]
            self._end(record)

    def _end(self, record: BatchRecord) -> None:
        record.status = "ended"
        record.ended_at = self._engine.clock()
        self._stats.batch_results.update(line["result"]["type"] for line in record.results)

    def _process(self, request: dict[str, Any]) -> dict[str, Any]:
        custom_id, params = request["custom_id"], request["params"]
        batch_settings = self._engine.scenario.batch
        dice = self._engine.dice_for(params)
        if dice.chance(batch_settings.expired_rate, "batch_expired"):
            return {"custom_id": custom_id, "result": {"type": "expired"}}
        try:
            if dice.chance(batch_settings.errored_rate, "batch_errored"):
                raise ApiError("api_error", "Internal server error (simulated)")
            prepared = self._engine.prepare(params)
        except ApiError as error:
            error_json = error_body(error.error_type, error.message, new_id("req_"))
            return {"custom_id": custom_id, "result": {"type": "errored", "error": error_json}}
        outcome = self._engine.answer(prepared, dice, service_tier="batch")
        self._stats.count_usage(outcome.usage, batch=True)
        self._stats.count_cache(eligible=outcome.cache.eligible, read=outcome.cache.read)
        self._stats.count_faults(outcome.faults)
        if outcome.quality is not None:
            self._stats.count_quality(outcome.quality.pack_size, outcome.quality.checked)
        self._stats.stop_reasons[outcome.stop_reason] += 1
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": outcome.message}}
