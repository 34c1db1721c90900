"""`check`: can this machine call Claude on a provider? Settings, reachability, credentials and
model access, with one small call (``max_tokens: 1``, a few input tokens)."""

from __future__ import annotations

import argparse
import os
from typing import Any

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
from blockbatch.core.providers import provider_info, resolve_model
from blockbatch.core.registry import DEFAULT_MODEL
from blockbatch.runtime.check import check_call
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
        return _report(s, out, await check_call(out, info.name, model, wire, client))
    finally:
        await client.close()


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
            if out.get("batch"):
                s.con.line(f"batch mode: {out['batch']}")
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
