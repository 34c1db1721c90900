"""The warm-up call and the stand-in pack: the requests that carry a run's cache prefix.

A run's packs share one prefix (system prompt, tools or output format, thinking and effort).
The warm-up call (``activities.llm.LlmActivities.warm_cache``) writes it to the prompt cache
before the packs start; the quote (``blockbatch.api.quote``) counts the same stand-in request
with the token-counting endpoint, and looks its prefix up in the ledger. Both are made here,
from the run's :class:`~blockbatch.core.context.RunContext` alone, so the two can never
disagree.
"""

from __future__ import annotations

from typing import Any, Literal

from blockbatch.core.context import RunContext
from blockbatch.core.planning import estimate_tokens
from blockbatch.core.prompt import alias_map, build_request

#: The ledger's pack path of a run's warm-up call (``warm_cache``), and the one stand-in
#: block it carries (the cache prefix is the system prompt and tool, whatever the blocks).
WARM_UP_PATH = "warm-up"
WARM_UP_BLOCK = {
    "block_uid": "warm-up",
    "block_type": "paragraph",
    "block_content": "(no block: this call only writes the prompt cache)",
}


def stand_in_request(
    ctx: RunContext, cache_ttl: Literal["5m", "1h"] | None = None
) -> dict[str, Any]:
    """The request of a pack holding only the stand-in block: the run's system prompt,
    answer channel, thinking and effort (its cache prefix), room for one result. The
    quote counts it (``blockbatch.core.quote_tokens.count_plan``); the warm-up is made from it.
    ``cache_ttl``: the prefix's cache lifetime (``None``: the run's ``cache_ttl``)."""
    aliases = alias_map([WARM_UP_BLOCK["block_uid"]]) if ctx.options.short_ids else None
    max_tokens = ctx.pack([estimate_tokens(WARM_UP_BLOCK["block_content"])]).max_tokens
    return build_request(
        ctx.spec,
        [WARM_UP_BLOCK],
        max_tokens=max_tokens,
        model=ctx.model.id,
        shape=ctx.shape,
        cache_ttl=cache_ttl or ctx.options.cache_ttl,
        aliases=aliases,
    )


def warm_up_request(
    ctx: RunContext, cache_ttl: Literal["5m", "1h"] | None = None
) -> dict[str, Any]:
    """The warm-up call's request: it writes the packs' cache prefix (contract §5), with
    the run's ``cache_ttl`` or the one given (a batch round's pre-warm: the batch TTL).

    ``max_tokens: 0`` (the prompt processed and cached, nothing generated, no output
    billed) wherever the API takes it: it refuses it with a forced ``tool_choice``, with
    ``output_config.format``, with ``thinking.type: enabled`` (never sent), with streaming
    and in batches (the warm-up is neither).

    - forced tool (``tool``, ``strict_tool``): the packs' system prompt and tools with
      ``tool_choice: auto``, which changes only the messages layer of the cache, not the
      tools and system the packs read;
    - ``auto_tool``: the packs' request as it is, with ``max_tokens: 0``;
    - ``json``: the stand-in pack itself (:func:`stand_in_request`), a real call with room
      for one result. The format adds a hidden system prompt, so a warm-up without it
      would most likely cache another prefix (the contract marks this [??]); one small
      answer costs far less than the first wave of packs each writing the prefix at the
      cache-write price instead of reading it.

    With short ids its system prompt and tool say so, like the packs', so it writes
    their prefix.
    """
    request = stand_in_request(ctx, cache_ttl)
    if ctx.shape.channel == "json":
        return request
    request["max_tokens"] = 0
    if ctx.shape.forced:
        request["tool_choice"] = {"type": "auto", "disable_parallel_tool_use": True}
    return request
