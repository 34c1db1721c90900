"""The quote's input tokens: a run's prompt by part (:class:`PromptTokens`), counted with
the token-counting endpoint (:func:`count_plan`, :func:`counted_tokens`) or taken from the
planner's estimates (:func:`planner_tokens`). Pure: ``blockbatch/api/quote.py`` sends the
counting requests; ``blockbatch/core/quote.py`` quotes from what they give."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from blockbatch.core.context import RunContext
from blockbatch.core.planning import BLOCK_WRAPPER_TOKENS, estimate_tokens
from blockbatch.core.prompt import alias_map, build_messages, user_instructions
from blockbatch.core.registry import scaled_tokens

#: A token-counting request holds blocks up to this share of the model's context window,
#: by the planner's (high) estimate, so a request always fits.
COUNT_CHUNK_SHARE = 0.5


@dataclass(frozen=True)
class PromptTokens:
    """A run's input tokens by part, counted by the API or estimated by the planner.

    Attributes:
        source: ``count_tokens`` (the API's token-counting endpoint) or ``planner``.
        prefix: the cacheable prefix every call carries: tool definitions (with the API's
            tool-use prompt) and the system prompt.
        per_call: the rest of every call's fixed input (instructions, message framing).
        blocks: every block's JSON item, once.
        warm_up: the whole input of the sync warm-up call.
        requests: token-counting requests made.
        simulated: the local simulator answered them (its own count, not Claude's).
    """

    source: Literal["count_tokens", "planner"]
    prefix: int
    per_call: int
    blocks: int
    warm_up: int
    requests: int = 0
    simulated: bool = False


def planner_tokens(
    ctx: RunContext, block_tokens: Sequence[int], warm_up_content: str
) -> PromptTokens:
    """Input by the planner's estimates, scaled for the run model's tokenizer: the run's
    own view of its prefix and packs."""
    return PromptTokens(
        source="planner",
        prefix=ctx.fixed_prompt_tokens,
        per_call=0,
        blocks=scaled_tokens(ctx.model, sum(t + BLOCK_WRAPPER_TOKENS for t in block_tokens)),
        warm_up=ctx.pack([estimate_tokens(warm_up_content)]).est_input_tokens,
    )


@dataclass(frozen=True)
class CountPlan:
    """The token-counting requests of a quote: keyword arguments of
    ``client.messages.count_tokens``, in the order :func:`counted_tokens` reads the answers.

    Attributes:
        requests: the warm-up request; its messages alone; a pack message holding no
            block; then the document's blocks as pack messages, ``chunks`` of them.
        chunks: how many requests hold blocks.
    """

    requests: list[dict[str, Any]]
    chunks: int


#: What a pack request carries that count_tokens counts too (not max_tokens).
_COUNTED = ("system", "tools", "tool_choice", "output_config", "thinking", "messages")


def count_plan(
    ctx: RunContext,
    blocks: Sequence[Mapping[str, str]],
    block_tokens: Sequence[int],
    warm_up: Mapping[str, Any],
) -> CountPlan:
    """The few requests that count a run's input.

    The warm-up request with and without its system prompt and tool differ by exactly the
    cacheable prefix; a pack message with an empty array is every call's own fixed part;
    the blocks go in consecutive chunks of up to :data:`COUNT_CHUNK_SHARE` of the context
    window (by estimate), each a pack message as the run sends it.

    Args:
        ctx: the run's context.
        blocks: ``block_uid``, ``block_type`` and ``block_content`` of every block.
        block_tokens: the planner's estimate of each block.
        warm_up: the run's stand-in pack request (``blockbatch.core.warm_up.stand_in_request``):
            its system prompt and answer channel (tools, or the output format) as sent.
    """
    model = ctx.model.id
    with_prefix = {"model": model, **{key: warm_up[key] for key in _COUNTED if key in warm_up}}
    empty = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": user_instructions(ctx.spec, 1)},
                {"type": "text", "text": "[]"},
            ],
        }
    ]
    requests: list[dict[str, Any]] = [
        with_prefix,
        {"model": model, "messages": warm_up["messages"]},
        {"model": model, "messages": empty},
    ]
    # The planner's estimates are old-tokenizer tokens: the window is the model's.
    budget = max(1, int(ctx.model.context_window * COUNT_CHUNK_SHARE / ctx.model.tokenizer_scale))
    start = 0
    while start < len(blocks):
        end, size = start + 1, block_tokens[start]
        while end < len(blocks) and size + block_tokens[end] <= budget:
            size += block_tokens[end]
            end += 1
        chunk = blocks[start:end]
        # Named as the run names them: short ids (b1, b2, ...) unless they are off.
        aliases = alias_map([b["block_uid"] for b in chunk]) if ctx.options.short_ids else None
        requests.append({"model": model, "messages": build_messages(ctx.spec, chunk, aliases)})
        start = end
    return CountPlan(requests=requests, chunks=len(requests) - 3)


def counted_tokens(
    plan: CountPlan, answers: Sequence[int], *, simulated: bool = False
) -> PromptTokens:
    """The input by part from the answers to :func:`count_plan`'s requests, in order
    (``simulated``: the simulator gave them)."""
    if len(answers) != len(plan.requests):
        raise ValueError(f"expected {len(plan.requests)} counts, got {len(answers)}")
    warm_up, warm_up_bare, empty, *chunks = answers
    return PromptTokens(
        source="count_tokens",
        prefix=max(warm_up - warm_up_bare, 0),
        per_call=empty,
        blocks=sum(max(c - empty, 0) for c in chunks),
        warm_up=warm_up,
        requests=len(answers),
        simulated=simulated,
    )


# ------------------------------------------------------------------ output tokens
