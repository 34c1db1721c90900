"""Request bodies and their size limits (contract §6, "Error types": 413 ``request_too_large``)."""

from __future__ import annotations

from aiohttp import web

from blockbatch.simulator.errors import ApiError

#: The largest request bodies the API takes (contract §6, "Error types": 413
#: ``request_too_large``): Messages and count_tokens 32 MB, Message Batches 256 MB.
MESSAGES_MAX_BYTES = 32 * 1024**2
BATCH_MAX_BYTES = 256 * 1024**2


async def read_body(request: web.Request, limit: int) -> bytes:
    """The request body, or a 413 ``request_too_large`` above ``limit`` bytes (checked
    on the declared length first, so an oversized body is not read)."""
    if request.content_length is not None and request.content_length > limit:
        raise too_large(limit)
    raw = await request.read()
    if len(raw) > limit:
        raise too_large(limit)
    return raw


def too_large(limit: int) -> ApiError:
    return ApiError(
        "request_too_large", f"Request exceeds the maximum allowed number of bytes ({limit:,})."
    )
