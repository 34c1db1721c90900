"""What the front doors read: runs, review pages, ledger rows, retries, the review grid.

The store (``blockbatch.store``) returns these; the Python API, the CLI and the web app show
them. They hold no I/O: a reader that imports them needs no database driver.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from blockbatch.core.budget import learned_costs, left_to_do
from blockbatch.core.registry import TokenCounts, known_model_names
from blockbatch.core.review import ANSWERED
from blockbatch.core.run_types import ACTIVE_STATUSES, BudgetLeft, RunResult
from blockbatch.core.schema import SchemaSpec

#: A run in one of these has not finished yet (a cancelling run still winds down).
UNFINISHED = (*ACTIVE_STATUSES, "cancelling")


class RunInfo(TokenCounts):
    """One run as stored: what was asked, where it stands, what it cost."""

    run_id: str
    status: str
    error: str | None
    document_id: str
    document_name: str
    schema_id: str
    schema_name: str
    model: str
    settings: dict[str, Any]
    workflow_id: str | None
    #: Live overlay counts by status (pending, ai_complete, failed, cancelled, confirmed,
    #: rejected, set_aside).
    blocks: dict[str, int]
    blocks_total: int
    pack_count: int
    calls: int
    split_events: int
    cost_usd: float
    #: Blocks answered at planning by an earlier run's answer, and what that saved.
    blocks_reused: int = 0
    reuse_saved_usd: float = 0.0
    #: Blocks of a set-aside type the run kept unsent (not in ``blocks_total``), and what
    #: sending them was estimated to cost.
    blocks_set_aside: int = 0
    set_aside_usd: float = 0.0
    #: Who answered the run's calls (blockbatch/core/endpoint.py ``Endpoint.label``: ``anthropic``,
    #: ``simulator 127.0.0.1:8765``), from its ledger.
    endpoints: list[str] = Field(default_factory=list)
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    #: A run stopped by its budget: the cost of its calls that answered blocks (``work``),
    #: of its first warm-up (``warm_up``) and its largest reservation (``largest_call``),
    #: for what finishing would cost.
    budget_costs: dict[str, float] | None = None

    @property
    def simulated(self) -> bool:
        """Whether the simulator answered any of the run's calls."""
        return any(e.split(" ", 1)[0] == "simulator" for e in self.endpoints)

    @property
    def active(self) -> bool:
        """Whether the run may still change (created, planning, running or cancelling)."""
        return self.status in UNFINISHED

    @property
    def duration_s(self) -> float | None:
        """Seconds from creation to the end; None while the run has not finished."""
        if self.finished_at is None:
            return None
        return (self.finished_at - self.created_at).total_seconds()

    def result(self) -> RunResult:
        """The run's counters as a :class:`RunResult` (final once the run has finished)."""
        b = self.blocks
        done = sum(b.get(s, 0) for s in ANSWERED)
        return RunResult.model_validate(
            {
                **self.model_dump(include=set(RunResult.model_fields)),
                "blocks_ai_complete": done,
                "blocks_failed": b.get("failed", 0),
                "blocks_cancelled": b.get("cancelled", 0),
                "budget": self.budget_left(done),
                "priced_from_configuration": self.model not in known_model_names(),
            }
        )

    @property
    def max_cost_usd(self) -> float | None:
        """The run's budget (``None``: none)."""
        value = self.settings.get("max_cost_usd")
        return float(value) if value is not None else None

    def budget_left(self, done: int | None = None) -> BudgetLeft | None:
        """What a run stopped by its budget has left to do (``None`` for any other run)."""
        if self.status != "budget_exhausted":
            return None
        if done is None:
            done = sum(self.blocks.get(s, 0) for s in ANSWERED)
        costs = self.budget_costs or {}
        return left_to_do(
            self.max_cost_usd or 0.0,
            spent=self.cost_usd,
            blocks_done=done,
            blocks_left=self.blocks_total - done,
            work_spent=costs.get("work"),
            restart_usd=costs.get("warm_up", 0.0),
            largest_call_usd=costs.get("largest_call", 0.0),
            next_call_usd=learned_costs(costs),
            reused=self.blocks_reused,
        )


class BlockProvenance(BaseModel):
    """Where a block came from in its file (blockbatch/core/blocks.py ``Provenance``).

    ``char_start``/``char_end``: the block's span in the file's extracted text; ``page``
    (1-based page, slide or sheet), ``bbox`` (x0, y0, x1, y1 in points, top-left origin) and
    ``page_size`` (width, height) for paged formats; ``heading_path``: the headings it sits
    under, outermost first; ``source``: the file's name.
    """

    source: str | None = None
    char_start: int
    char_end: int
    page: int | None = None
    bbox: tuple[float, float, float, float] | None = None
    page_size: tuple[float, float] | None = None
    heading_path: list[str] = []


class CallRow(TokenCounts):
    """One ledger row: a request sent to Claude and what came back."""

    call_id: int
    pack_path: str
    pack_attempt: int
    blocks: int
    #: What the row was for: ``pack`` (a sync pack call), ``batch_request``, ...
    purpose: str
    #: Who answered: ``anthropic`` (the Claude API) or ``simulator``.
    provider: str
    #: The base URL's host when it is not Anthropic's own API.
    endpoint_host: str | None = None
    #: ``messages`` or ``message_batches``.
    api: str | None
    status: str
    stop_reason: str | None
    http_status: int | None
    error_type: str | None
    error_message: str | None
    cost_usd: float
    latency_ms: int | None
    workflow_id: str | None
    workflow_run_id: str | None
    activity_id: str | None
    activity_attempt: int | None
    started_at: datetime


#: How many characters of an elided system prompt or tool definition are shown.
ELIDE_AT = 200


class PromptPart(BaseModel):
    """The system prompt or the tool definitions of a call, elided unless asked in full."""

    #: Characters of ``text`` in full, and the sha256 of its UTF-8 bytes.
    length: int
    sha256: str
    elided: bool
    #: The text (system: its text blocks joined; tools: JSON), cut at ``ELIDE_AT`` when elided.
    text: str
    #: The stored JSON as sent (only in full).
    value: Any = None

    @classmethod
    def of(cls, value: Any, *, full: bool, as_text: bool) -> PromptPart | None:
        if value is None:
            return None
        if isinstance(value, str):
            text = value
        elif (
            as_text
            and isinstance(value, list)
            and all(isinstance(b, dict) and isinstance(b.get("text"), str) for b in value)
        ):
            text = "\n\n".join(b["text"] for b in value)
        else:
            text = json.dumps(value, ensure_ascii=False, indent=2)
        digest = hashlib.sha256(text.encode()).hexdigest()
        elided = not full and len(text) > ELIDE_AT
        return cls(
            length=len(text),
            sha256=digest,
            elided=elided,
            text=text[:ELIDE_AT] + "…" if elided else text,
            value=value if full else None,
        )


class CallDetail(CallRow):
    """One ledger row in full: the request as sent (system and tools joined from
    ``prompt_prefixes``), and the raw response or the error. Never the API key: request
    headers are not stored."""

    run_id: str
    model: str
    block_uids: list[str]
    #: The short ids the request named its blocks by (alias -> block_uid), as recorded
    #: before it was sent; ``None`` when it named them by block_uid.
    block_aliases: dict[str, str] | None = None
    request_id: str | None
    cache_creation_1h_tokens: int
    finished_at: datetime | None
    provider_batch_id: str | None
    custom_id: str | None
    prefix_sha256: str | None
    #: The request without system and tools, as stored.
    request: dict[str, Any]
    system: PromptPart | None
    tools: PromptPart | None
    #: The raw answer (a Messages response, or a batch result line's content).
    response: Any
    apply_outcome: Any

    @property
    def named_blocks(self) -> list[str]:
        """The blocks as a person reads them: ``b1 = doc:0`` for a block sent under a short
        id (the answer's ids map back through this record), else the block_uid."""
        if not self.block_aliases:
            return list(self.block_uids)
        by_uid = {uid: alias for alias, uid in self.block_aliases.items()}
        return [f"{by_uid[u]} = {u}" if u in by_uid else u for u in self.block_uids]


#: One block of an export: block_uid, block_index, block_type, block_content, metadata,
#: and its overlay's status, staging, confirmed, last_error, reason_code,
#: reused_from_run_id and reused_from_call_id (set when the overlay reused an earlier run's
#: answer; all None without an overlay), ``evidence`` (each value's quote and span, a
#: schema asking for evidence) and ``model_answer`` (the model's own answer once a person
#: edited it), and ``review``: its review actions in order (edit / confirm / reject: who,
#: when, field, before, after), None when nobody reviewed it.
ExportRow = Mapping[str, Any]


class PrefixToCount(BaseModel):
    """A run's prompt prefix and one of its requests, for the token-counting endpoint:
    the request counted with and without its system prompt and tools differs by the
    prefix (``blockbatch.api.quote.count_prefix``)."""

    sha256: str
    model: str
    system: Any
    tools: Any
    #: The stored request (without system and tools): its messages and tool_choice.
    request: dict[str, Any]
    #: Where the call went (its ``endpoint_host``; ``None``: Anthropic's own API): a count
    #: elsewhere would use another tokenizer.
    endpoint_host: str | None = None


class ItemUsage(TokenCounts):
    """One block's share of its run's calls (``llm_batch``'s per-item usage).

    Each call's tokens and cost are split over the blocks it was sent with, by their
    estimated tokens; a call sent without blocks (the warm-up, a probe) over all the run's
    blocks the same way. So the shares of a run's blocks add up to the run's usage (tokens
    rounded per block). A reused answer's block has nothing of this run's calls.
    """

    cost_usd: float = 0.0
    #: How many of the run's pack calls the block was sent in (more than one after a
    #: split or a retry).
    calls: int = 0


class RetryRecord(BaseModel):
    """One retry of a run, as ``run_retries`` keeps it."""

    run_id: str
    retry: int
    workflow_run_id: str
    selection: dict[str, Any]
    reasons: dict[str, int]
    block_count: int
    first_pack: int
    pack_count: int
    first_round: int | None
    previous_status: str
    previous_error: str | None
    started_at: datetime
    finished_at: datetime | None
    final_status: str | None

    @property
    def duration_s(self) -> float | None:
        """Seconds from the claim to the end; None while the retry runs."""
        if self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


class OverlayChange(BaseModel):
    """One row of the overlay change log: a block's status or value changed."""

    id: int
    block_uid: str
    changed_at: datetime
    old_status: str
    new_status: str
    reason_code: str | None
    last_error: str | None
    attempt_count: int
    pack_index: int | None
    pack_path: str | None
    call_id: int | None
    value_changed: bool


class GridRow(BaseModel):
    """One block of a run next to its overlay, and the last review act on it."""

    block_uid: str
    block_index: int
    block_type: str
    block_content: str
    #: The block's metadata: a CSV row's other columns, a JSONL record's other keys ...
    metadata: dict[str, Any] = {}
    status: str
    staging: dict[str, Any] | None
    confirmed: dict[str, Any] | None
    #: The model's own answer once a person edited staging (None: never edited).
    model_answer: dict[str, Any] | None = None
    attempt_count: int
    last_error: str | None
    reason_code: str | None
    pack_path: str | None
    #: Set when the overlay reused an earlier run's answer: that run and its ledger call.
    reused_from_run_id: str | None = None
    reused_from_call_id: int | None = None
    #: The last review act: ``{"action", "reviewer", "at"}``, None when never reviewed.
    last_action: dict[str, Any] | None
    #: Per field of the model's answer, its quote and span in the block (a schema asking
    #: for evidence, blockbatch/core/evidence.py), else None.
    evidence: dict[str, Any] | None = None
    #: Where the block came from in its file; None for blocks stored without it.
    provenance: BlockProvenance | None = None
    #: Whether the block's page can be shown with its box: it has a box, and its document's
    #: file is stored (a PDF; blockbatch/store/repo.py ``PAGED_FORMATS``).
    page_picture: bool = False
    #: Set when the run's escalation sent the block up (docs/ESCALATION.md): its
    #: ``status`` (escalated, failed, skipped, to_escalate), ``reason``, ``model`` and the
    #: three answers, ``first`` and ``second`` (the run's model, two packings) and
    #: ``escalated`` (the escalation model's).
    escalation: dict[str, Any] | None = None


class GridFilter(BaseModel):
    """Which blocks a review page shows (each empty or ``None``: any)."""

    model_config = ConfigDict(extra="forbid")

    #: Overlay statuses (``--status``, ``--failed``; the web app's one status).
    statuses: list[str] = []
    #: Reason codes or review flags (blockbatch/core/reasons.py).
    reasons: list[str] = []
    #: Only these blocks.
    block_uids: list[str] = []
    block_type: str | None = None
    #: Only blocks the quality probe found disagreeing (blockbatch/store/quality.py).
    disagreeing: bool = False


class GridPage(BaseModel):
    """One page of the grid in block order, with the keys of the pages around it."""

    run: RunInfo
    fields: list[str]
    #: The run's schema: each field's type, enum and bounds (how the grid edits it) and
    #: the rules an edited overlay must meet.
    spec: SchemaSpec
    rows: list[GridRow]
    #: Blocks matching the filter in the whole run (at most COUNT_CAP when ``capped``).
    total: int
    capped: bool = False
    #: ``after=`` for the next page, ``before=`` for the previous one (None: no such page).
    next_after: int | None
    prev_before: int | None
    #: The input's columns that say which row each block is (``ticket_id``), shown with
    #: each block: the first column other than the text, or the ones asked for.
    id_columns: list[str] = []


class ReviewAction(BaseModel):
    """One recorded review act on a block: who did what, when, and the values around it."""

    id: int
    block_uid: str
    action: str
    reviewer: str
    at: datetime
    field: str | None
    before: Any
    after: Any
    old_status: str
    new_status: str


class ReviewActivity(BaseModel):
    """Review acts done together (one statement: a bulk confirm of many blocks, or one
    edit): what, who, when, on how many blocks; the first block's act in full."""

    action: str
    reviewer: str
    at: datetime
    blocks: int
    first_block: str
    last_block: str
    #: The first act's field and values (an edit: the field's value before and after).
    field: str | None
    before: Any
    after: Any


@dataclass(frozen=True)
class LimiterView:
    """One limiter as the CLI's ``limits`` and ``status`` show it."""

    key_hash: str
    #: The rate-limit class (``blockbatch.core.ratelimit.rate_class``).
    model: str
    limits: dict[str, int]
    levels: dict[str, float]
    factor: float
    #: The ramp's share of the minute capacity open now (blockbatch/core/ratelimit.py).
    ramp: float
    learned: bool
    admitted: int
    throttled: int
    in_flight: int
    #: run_id -> calls admitted in the last minute.
    shares: dict[str, int]
    waiting_runs: list[str]


@dataclass(frozen=True)
class Disagreement:
    """A block whose packed and single answers differ, both answers side by side."""

    block_uid: str
    block_index: int
    block_type: str
    block_content: str
    pack_size: int
    position: int
    packed: dict[str, Any]
    single: dict[str, Any]
    fields: list[dict[str, Any]]
