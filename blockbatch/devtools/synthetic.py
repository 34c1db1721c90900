"""Synthetic documents for tests, benchmarks and chaos runs (deterministic from a seed)."""

from __future__ import annotations

import random

WORDS = [
    "incident",
    "pager",
    "rotation",
    "escalation",
    "runbook",
    "latency",
    "budget",
    "alert",
    "dashboard",
    "owner",
    "service",
    "deploy",
    "rollback",
    "postmortem",
    "customer",
    "impact",
    "severity",
    "database",
    "replica",
    "queue",
    "backlog",
    "timeout",
    "retry",
    "capacity",
    "region",
    "failover",
    "certificate",
    "rotation",
    "audit",
    "handoff",
]


def markdown_document(n_blocks: int, seed: int = 7) -> bytes:
    """A Markdown document of exactly ``n_blocks`` blocks: a heading every ten, paragraphs
    of 8-60 words otherwise."""
    rng = random.Random(seed)
    parts = []
    for i in range(n_blocks):
        if i % 10 == 0:
            parts.append(f"## Section {i // 10 + 1}: {rng.choice(WORDS).title()}")
        else:
            words = [rng.choice(WORDS) for _ in range(rng.randint(8, 60))]
            parts.append(f"Paragraph {i}. " + " ".join(words).capitalize() + ".")
    return ("\n\n".join(parts) + "\n").encode()


def checkable_properties() -> dict[str, dict[str, object]]:
    """Schema fields the simulator computes from each block's own content, so every value
    can be checked against the block (plus one free-text field)."""
    return {
        "word_count": {"type": "integer", "minimum": 0},
        "char_count": {"type": "integer", "minimum": 0},
        "first_40_chars": {"type": "string", "maxLength": 40},
        "block_type": {"type": "string"},
        "summary": {"type": "string", "maxLength": 200},
    }
