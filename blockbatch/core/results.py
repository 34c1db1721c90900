"""Turn one pack's raw model response into per-block overlays, strictly by block_uid.

Nothing here trusts the order of the results: a result belongs to the block whose
block_uid it carries, exactly once, or to nobody. What cannot be mapped is reported so
the caller can keep the valid part and retry the rest in smaller packs.

The answer is read from its content blocks by type, never by position (a thinking model's
blocks come first): the ``tool_use`` blocks of our tool (the tool channels), else the
``text`` blocks, which hold one JSON object ``{"results": [...]}`` (the json channel,
``output_config.format``). Only the request decides which a response can hold (a json
request sends no tool), so the response's blocks say which channel answered. A JSON text
cut off at ``max_tokens`` keeps its complete leading results, as a cut tool call does.

Stop reasons: ``max_tokens`` and ``model_context_window_exceeded`` are a truncation;
``refusal`` is the model declining (``PackResults.refusal``, the category), a per-block
outcome never asked again on the same model; ``pause_turn`` (server tools only, which
blockbatch never sends) leaves no answer.

A call sent with short ids (``b1``, ``b2``, …; ``blockbatch.core.prompt.alias_map``) is parsed with
the alias map its ledger row recorded: a result's id is looked up in that map and nowhere
else, so an alias the call did not use, or a full block_uid where aliases were sent, is
an unknown id, exactly like a wrong block_uid.

Evidence (``prompt_config.evidence``): each result's ``evidence`` object is taken out before
the fields are validated, and its quotes kept by block_uid (``PackResults.evidence``, the
quotes of valid results only); a missing or malformed evidence object never makes a result
invalid: its values are grounded as unquoted (blockbatch/core/evidence.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from blockbatch.core.evidence import EVIDENCE_KEY, quotes_of
from blockbatch.core.prompt import TOOL_NAME
from blockbatch.core.reasons import ReasonCode
from blockbatch.core.schema import RESERVED_FIELD, SchemaSpec

_REASON_LIMIT = 280
#: Stop reasons that cut the answer off before its end (contract §2, "Failure modes").
TRUNCATING = frozenset({"max_tokens", "model_context_window_exceeded"})


@dataclass
class PackResults:
    """What one response says about each block of its pack.

    Attributes:
        valid: block_uid -> overlay (the fields only), valid against the overlay schema.
        invalid: block_uid -> why its one result fails the schema (a per-block failure).
        missing: expected uids without a result, in expected order.
        duplicates: expected uids with more than one result; all copies are discarded.
        unknown: ids in the results that name no block of the pack, as received, in
            order of appearance.
        payload_error: why the payload as a whole is unusable (no tool call or JSON
            text, input not an object, results not a list, no item an object), else
            ``None``.
        truncated: the response stopped at ``max_tokens`` (or the context window).
        refusal: the model refused (``stop_reason`` ``refusal``): the
            ``stop_details.category``, or ``"unspecified"``; else ``None``.
        expected: the pack's uids, in order.
        unmappable: result items that are not objects or lack a string block_uid.
        notes: other observations worth a log line (merged tool calls, ...).
        evidence: block_uid -> field -> quote, for valid results of a schema that asks
            for evidence (the quotes as the model wrote them, not yet checked).
    """

    valid: dict[str, dict[str, Any]] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    payload_error: str | None = None
    truncated: bool = False
    refusal: str | None = None
    expected: list[str] = field(default_factory=list)
    unmappable: int = 0
    notes: list[str] = field(default_factory=list)
    evidence: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def unfinished(self) -> list[str]:
        """Expected uids without a valid overlay, in expected order."""
        return [uid for uid in self.expected if uid not in self.valid]

    @property
    def mapping_failed(self) -> bool:
        """Whether the pack as a whole went wrong (grounds to split, not a block's fault)."""
        return bool(
            self.missing
            or self.duplicates
            or self.unknown
            or self.unmappable
            or self.payload_error
            or self.truncated
            or self.refusal
        )

    def reason_code(self, uid: str) -> ReasonCode | None:
        """Why ``uid`` has no valid overlay, as a reason code (``None``: it has one).

        A refused answer is ``refused`` for every block it did not finish; a block's own
        invalid result is ``invalid_value``; otherwise what went wrong with the answer as
        a whole: cut off at ``max_tokens`` (``truncated``), an unusable payload or an
        ambiguous (duplicated) result (``malformed_answer``), or no result for the block
        (``missing_from_answer``). Meant for a block that failed alone.
        """
        if uid in self.valid:
            return None
        if self.refusal is not None:
            return "refused"
        if uid in self.invalid:
            return "invalid_value"
        if self.truncated:
            return "truncated"
        if self.payload_error or uid in self.duplicates:
            return "malformed_answer"
        return "missing_from_answer"

    def summary(self) -> str:
        """A short human reason, e.g. ``"max_tokens; 3 missing; 1 duplicate"``."""
        parts: list[str] = []
        if self.refusal is not None:
            parts.append(f"refused ({self.refusal})")
        if self.truncated:
            parts.append("max_tokens")
        if self.payload_error:
            parts.append(self.payload_error)
        counts = (
            (len(self.missing), "missing", "missing"),
            (len(self.duplicates), "duplicate", "duplicates"),
            (len(self.unknown), "unknown uid", "unknown uids"),
            (self.unmappable, "item without block_uid", "items without block_uid"),
            (len(self.invalid), "invalid", "invalid"),
        )
        parts.extend(f"{n} {one if n == 1 else many}" for n, one, many in counts if n)
        if not parts:
            return f"ok: {len(self.valid)} valid"
        return "; ".join(parts)


def parse_results(
    response: Mapping[str, Any],
    expected_uids: Sequence[str],
    spec: SchemaSpec,
    aliases: Mapping[str, str] | None = None,
) -> PackResults:
    """Map a Messages API response to the pack's blocks by block_uid.

    Args:
        response: the raw response JSON as a dict (``content``, ``stop_reason``, ...).
        expected_uids: the pack's block_uids.
        spec: the schema the overlays must satisfy.
        aliases: the short ids the call was sent with (alias -> block_uid), as its
            ledger row recorded them; ``None`` when it named blocks by block_uid.

    Returns:
        The valid overlays and everything that kept the other blocks from having one,
        by block_uid (``unknown`` lists ids as the answer wrote them).

    Raises:
        ValueError: ``aliases`` does not name each expected block exactly once (the
            record of the call is inconsistent; nothing can be mapped safely).
    """
    expected = list(dict.fromkeys(expected_uids))
    if aliases is not None and sorted(aliases.values()) != sorted(expected):
        raise ValueError("the call's alias map does not name each of its blocks exactly once")
    stop = response.get("stop_reason")
    out = PackResults(expected=expected, truncated=stop in TRUNCATING)
    if stop == "refusal":
        details = response.get("stop_details")
        category = details.get("category") if isinstance(details, Mapping) else None
        out.refusal = category if isinstance(category, str) and category else "unspecified"
    if stop == "pause_turn":
        out.payload_error = (
            "the API paused the turn (pause_turn), which only server tools "
            "do and none was sent: no answer"
        )
        return _all_missing(out)
    items = _result_items(response, out)
    if items is None:
        return _all_missing(out)

    by_id: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        wire_id = item.get(RESERVED_FIELD) if isinstance(item, dict) else None
        if not isinstance(wire_id, str):
            out.unmappable += 1
            continue
        by_id.setdefault(wire_id, []).append(item)
    if items and out.unmappable == len(items):
        out.payload_error = "no result item is an object with a string block_uid"
        out.unmappable = 0
        return _all_missing(out)

    # The id each block was sent under: its alias, or its block_uid.
    known = dict(aliases) if aliases is not None else {uid: uid for uid in expected}
    out.unknown = [wire_id for wire_id in by_id if wire_id not in known]
    by_uid = {known[wire_id]: copies for wire_id, copies in by_id.items() if wire_id in known}
    validator = Draft202012Validator(spec.overlay_json_schema())
    asks_evidence = spec.prompt_config.evidence
    for uid in expected:
        copies = by_uid.get(uid, [])
        if not copies:
            out.missing.append(uid)
        elif len(copies) > 1:
            out.duplicates.append(uid)
        else:
            overlay = {k: v for k, v in copies[0].items() if k != RESERVED_FIELD}
            raw_evidence = overlay.pop(EVIDENCE_KEY, None) if asks_evidence else None
            reason = _invalid_reason(validator, overlay)
            if reason is None:
                out.valid[uid] = overlay
                if asks_evidence:
                    out.evidence[uid] = quotes_of(raw_evidence, spec.properties)
            else:
                out.invalid[uid] = reason
    return out


def _all_missing(out: PackResults) -> PackResults:
    # Nothing was mapped: every block is unfinished and none of it is the block's fault.
    out.missing = list(out.expected)
    return out


def _result_items(response: Mapping[str, Any], out: PackResults) -> list[Any] | None:
    """The result items of the answer, or ``None`` with ``payload_error`` set: every call
    of our tool, or else the JSON object of the text blocks."""
    content = response.get("content")
    if not isinstance(content, list):
        out.payload_error = "the response has no content list"
        return None
    blocks = [block for block in content if isinstance(block, Mapping)]
    calls = [b for b in blocks if b.get("type") == "tool_use" and b.get("name") == TOOL_NAME]
    texts = [b.get("text") for b in blocks if b.get("type") == "text"]
    if calls:
        return _tool_items(calls, out)
    text = "".join(t for t in texts if isinstance(t, str)).strip()
    stop = response.get("stop_reason")
    if text:
        return _text_items(text, out, stop)
    out.payload_error = (
        f"no {TOOL_NAME} tool call and no JSON answer in the response (stop_reason={stop})"
    )
    return None


def _tool_items(calls: list[Mapping[str, Any]], out: PackResults) -> list[Any] | None:
    if len(calls) > 1:
        out.notes.append(f"{len(calls)} {TOOL_NAME} calls; their results were merged")
    items: list[Any] = []
    for call in calls:
        tool_input = call.get("input")
        if not isinstance(tool_input, Mapping):
            out.payload_error = "the tool input is not an object"
            return None
        results = _results_list(tool_input.get("results"), out, "the tool input's")
        if results is None:
            return None
        items.extend(results)
    return items


def _text_items(text: str, out: PackResults, stop: Any) -> list[Any] | None:
    """The results of a JSON text answer; a text cut off by truncation keeps the results
    it holds in full."""
    try:
        answer = json.loads(text)
    except json.JSONDecodeError as err:
        if out.truncated:
            leading = _leading_results(text)
            if leading is not None:
                out.notes.append(
                    f"the JSON answer was cut off; {len(leading)} complete results read from it"
                )
                return leading
            out.payload_error = "the JSON answer was cut off before any complete result"
        else:
            out.payload_error = (
                f"the answer is neither a {TOOL_NAME} tool call nor JSON "
                f"text ({err.msg} at {err.pos}; stop_reason={stop})"
            )
        return None
    if not isinstance(answer, Mapping):
        out.payload_error = "the JSON answer is not an object"
        return None
    return _results_list(answer.get("results"), out, "the JSON answer's")


def _results_list(results: Any, out: PackResults, whose: str) -> list[Any] | None:
    if isinstance(results, str):
        # Models sometimes send a nested array as JSON text; it is still their answer.
        try:
            results = json.loads(results)
            out.notes.append("results arrived as a JSON string and were decoded")
        except json.JSONDecodeError:
            pass
    if not isinstance(results, list):
        kind = "missing" if results is None else type(results).__name__
        out.payload_error = f"{whose} results is not a list ({kind})"
        return None
    return results


_RESULTS_START = re.compile(r'^\s*\{\s*"results"\s*:\s*\[')


def _leading_results(text: str) -> list[Any] | None:
    """The complete items at the start of a ``{"results": [...`` text that was cut off
    (``None``: it does not start so)."""
    start = _RESULTS_START.match(text)
    if start is None:
        return None
    decoder = json.JSONDecoder()
    items: list[Any] = []
    at = start.end()
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        try:
            item, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return items
        items.append(item)


def _invalid_reason(validator: Draft202012Validator, overlay: dict[str, Any]) -> str | None:
    errors = list(validator.iter_errors(overlay))
    if not errors:
        return None
    error = best_match(errors)
    reason = f"{_where(error)}: {_shorten(error.message)}"
    if len(errors) > 1:
        reason += f" (+{len(errors) - 1} more)"
    return reason[:_REASON_LIMIT]


def _where(error: ValidationError) -> str:
    path = [str(p) for p in error.absolute_path]
    return ".".join(path) if path else "result"


def _shorten(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[: limit - 1] + "…"
