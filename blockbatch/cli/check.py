"""`check`: can this machine call Claude on a provider? Settings, reachability, credentials and
model access, with one small call (``max_tokens: 1``, a few input tokens)."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from activities.sender import AnthropicSender, NotSent
from blockbatch.cli.options import add_field_option
from blockbatch.cli.parser import (
    EXIT_OK,
    EXIT_UNAVAILABLE,
    PROVIDER,
    Subparsers,
    add_command,
    examples,
)
from blockbatch.cli.session import Session
from blockbatch.core.answer import call_shape
from blockbatch.core.providers import ProviderName, Route, provider_info, resolve_model
from blockbatch.core.registry import DEFAULT_MODEL, ModelInfo, Usage, cost_usd
from blockbatch.runtime.claude import ProviderUnavailable, provider_client


async def cmd_check(args: argparse.Namespace, s: Session) -> int:
    info = provider_info(getattr(args, PROVIDER.dest))
    model, wire = resolve_model(
        info.name, args.model or DEFAULT_MODEL, s.settings.blockbatch_foundry_deployments
    )
    # Names only: whether each of the provider's variables is set, never a value.
    found = {name: bool(os.environ.get(name, "").strip()) for name in info.settings}
    out: dict[str, Any] = {
        "provider": info.name,
        "client": info.sdk_client,
        "settings_set": [n for n, ok in found.items() if ok],
        "model": wire,
        "registry_model": model.id,
        "ok": False,
    }
    try:
        client = provider_client(s.settings, info.name, timeout_s=30.0)
    except ProviderUnavailable as err:
        return _report(s, out, f"settings: {err}")
    try:
        return await _call(s, out, info.name, model, wire, client)
    finally:
        await client.close()


async def _call(
    s: Session,
    out: dict[str, Any],
    provider: ProviderName,
    model: ModelInfo,
    wire: str,
    client: Any,
) -> int:
    """The one small call, and what it says."""
    info = provider_info(provider)
    sender = AnthropicSender(client, lambda _: client)
    route = Route(provider, wire)
    request: dict[str, Any] = {
        "model": model.id,
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "Reply with OK."}],
    }
    thinking = call_shape(info.shaped(model), None, strict_fits=False).thinking
    if thinking is not None:  # thinking off, so the one output token answers
        request["thinking"] = dict(thinking)
    started = time.monotonic()
    try:
        sent = await sender.send(request, route)
    except NotSent as failed:
        error = failed.error
        if not failed.answered:
            problem = f"not reachable ({error.host or 'no host'}): {error.message}"
        elif error.status in (401, 403):
            problem = f"reachable, but the credentials were refused: {error.text}"
        elif error.status == 404:
            problem = f"reachable, but model {wire} is not available: {error.text}"
        else:
            problem = f"reachable, but the call failed: {error.text}"
        out["endpoint"] = (await sender.endpoint(route)).text() if failed.answered else None
        return _report(s, out, problem)
    endpoint = await sender.endpoint(route)
    usage = Usage.from_message(sent.message)
    out.update(
        ok=True,
        endpoint=endpoint.text(),
        simulated=endpoint.simulated,
        seconds=round(time.monotonic() - started, 2),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=cost_usd(model, usage),
        fallbacks=info.fallbacks_text(),
    )
    return _report(s, out, None)


def _report(s: Session, out: dict[str, Any], problem: str | None) -> int:
    out["problem"] = problem
    if s.con.json:
        s.con.data(out)
    else:
        settings = ", ".join(out["settings_set"]) or "none"
        s.con.line(f"provider: {out['provider']} ({out['client']}); set here: {settings}")
        if out.get("endpoint"):
            s.con.line(f"endpoint: {out['endpoint']}")
        if problem is None:
            s.con.line(
                f"model {out['model']} ({out['registry_model']}) answered in "
                f"{out['seconds']} s: {out['input_tokens']} input and {out['output_tokens']} "
                f"output tokens, ${out['cost_usd']:.6f}"
                + (" (SIMULATED)" if out.get("simulated") else "")
            )
            if out.get("fallbacks"):
                s.con.note(f"note: {out['fallbacks']}")
    if problem is not None:
        s.con.error(problem, EXIT_UNAVAILABLE)
        return EXIT_UNAVAILABLE
    return EXIT_OK


def add_check_parser(sub: Subparsers) -> None:
    """`check`'s options."""
    check = add_command(
        sub,
        "check",
        "check that this machine can call Claude on a provider",
        "Open the provider's client with this shell's environment (what a worker here would "
        "use) and send one small call (max_tokens 1, a few input tokens, billed): says "
        "which of the provider's settings are set, whether the endpoint is reachable, "
        "whether the credentials are accepted and whether the model answers. "
        "docs/providers.md says what each provider needs.",
        epilog=examples(
            "--provider bedrock",
            "--provider foundry --model claude-haiku-5-5",
            command="check",
        ),
    )
    add_field_option(check, PROVIDER)
    check.add_argument(
        "--model",
        metavar="MODEL",
        help=f"the model, as the provider knows it or by its id (default: {DEFAULT_MODEL})",
    )
