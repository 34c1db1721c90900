"""How a call of a run asks for its answer on its model: the channel, thinking and effort.

One rule (:func:`call_shape`) from the model's capabilities (``blockbatch.core.registry``), used by the
request builder, the planner (thinking tokens), the answer key and the simulator's tests.
Contract: ``../shared/reference/claude-api-2026-11.md`` §0-§3.

| the model | channel | thinking sent | thinks |
|---|---|---|---|
| takes a forced tool, has structured outputs, schema in the subset | ``strict_tool`` | off, the way the model allows | no, where it can be turned off |
| takes a forced tool, otherwise | ``tool`` | same | same |
| rejects a forced tool (Sonnet 5.5, Opus 5.5), structured outputs, schema in the subset | ``json`` (``output_config.format``) | same | same |
| rejects a forced tool, otherwise | ``auto_tool`` (``tool_choice: auto``; validated by us) | same | same |

Thinking off: nothing to send on a model that does not think by default; nothing either on
a forced tool that answers without thinking (Haiku 5.5); ``{"type": "disabled"}`` or
``{"type": "between_tools"}`` (Sonnet 5.5) at effort high or below; where thinking cannot
be turned off (Opus 5.5, Fable) or the effort is ``xhigh``/``max``, the call thinks and its
thinking tokens are planned for.

Effort: the run's, else :func:`default_effort`: ``low`` where the model thinks anyway
(thinking is output, and effort governs how much), else none sent (the model's default;
with thinking off, effort only shapes the answer's wording, which the schema fixes).
Thinking and effort are the same for every call of a run: both are part of the cached
prefix (contract §0 rule 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from blockbatch.core.registry import EFFORTS_THINKING_OFF, Effort, ModelInfo

Channel = Literal["tool", "strict_tool", "json", "auto_tool"]
#: Channels whose answer is a ``tool_use`` block of our tool (else a JSON ``text`` block).
TOOL_CHANNELS: frozenset[str] = frozenset({"tool", "strict_tool", "auto_tool"})
FORCED_CHANNELS: frozenset[str] = frozenset({"tool", "strict_tool"})


class EffortError(ValueError):
    """An effort the model does not take."""


@dataclass(frozen=True)
class CallShape:
    """What every call of a run sends besides its prompt, and whether it thinks."""

    channel: Channel
    #: The request's ``thinking`` (``None``: not sent).
    thinking: dict[str, Any] | None
    #: The request's ``output_config.effort`` (``None``: not sent).
    effort: Effort | None
    #: Whether the model thinks on these calls (thinking tokens billed as output, counted
    #: against ``max_tokens``).
    thinks: bool

    @property
    def forced(self) -> bool:
        return self.channel in FORCED_CHANNELS

    def key(self) -> dict[str, Any]:
        """What of the shape can change an answer: part of the answer key (blockbatch/core/reuse.py)."""
        return {"channel": self.channel, "thinking": self.thinking, "effort": self.effort}


def default_effort(model: ModelInfo) -> Effort | None:
    """The effort a run uses when it names none (module docstring)."""
    if model.default_effort is None:
        return None
    if model.thinking_default == "always" or (
        model.thinks_by_default and model.thinking_off is None
    ):
        return "low"
    return None


def check_effort(model: ModelInfo, effort: Effort | None) -> None:
    """Raises:
    EffortError: ``effort`` is set and the model takes no effort parameter."""
    if effort is not None and model.default_effort is None:
        raise EffortError(f"{model.id} takes no effort setting; leave --effort unset")


def call_shape(
    model: ModelInfo, effort: Effort | None = None, *, strict_fits: bool = True
) -> CallShape:
    """The channel, thinking and effort of a run's calls on ``model``.

    Args:
        model: the run's model (registry entry, with the Models API's facts).
        effort: the run's effort (``None``: :func:`default_effort`).
        strict_fits: the schema fits the structured-outputs subset and its limits
            (``blockbatch.core.prompt.strict_schema``); else the non-strict channel is used.

    Raises:
        EffortError: an effort on a model that takes none.
    """
    check_effort(model, effort)
    effort = effort if effort is not None else default_effort(model)
    structured = model.structured_outputs and strict_fits
    if model.forced_tool:
        channel: Channel = "strict_tool" if structured else "tool"
    else:
        channel = "json" if structured else "auto_tool"
    can_turn_off = effort is None or effort in EFFORTS_THINKING_OFF
    thinking: dict[str, Any] | None = None
    if not model.thinks_by_default or (
        channel in FORCED_CHANNELS and model.forced_tool_skips_thinking
    ):
        thinks = False
    elif model.thinking_off is not None and can_turn_off:
        thinking, thinks = {"type": model.thinking_off}, False
    else:
        thinks = True
    return CallShape(channel=channel, thinking=thinking, effort=effort, thinks=thinks)
