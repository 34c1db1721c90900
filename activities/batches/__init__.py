"""Provider batch mode: a run's packs as Anthropic Message Batches, in rounds.

A round is a set of pack attempts (``batch_requests`` rows) submitted together. The
activities form round 1 from the plan, submit a round (one provider batch per 100,000
requests / 256 MB), look at it, cancel it, stream its results into the ledger, and apply
them; whatever is unfinished becomes round n + 1. Only ids and counts cross Temporal.

| module | what |
|---|---|
| ``submit.py`` | ``open_batch_run``, ``submit_round``: requests built from Postgres, cut into parts |
| ``create.py`` | one provider batch created exactly once (orphan adoption after a crash) |
| ``watch.py`` | ``poll_round``, ``cancel_round`` |
| ``collect.py`` | ``collect_round``: results into the ledger |
| ``apply.py`` | ``apply_round``: overlays, then halves, retries, resubmissions |
| ``rounds.py`` | a round's membership (``batch_requests``) |
| ``base.py`` | pool, client, run context, heartbeats, API error mapping |

The pure rules (custom_ids, part sizes, ledger rows, decisions) are in
``core/batching.py``.
"""

from __future__ import annotations

from activities.batches.apply import ApplyActivities
from activities.batches.base import BATCH_REJECTED
from activities.batches.collect import CollectActivities
from activities.batches.submit import SubmitActivities
from activities.batches.watch import WatchActivities

__all__ = ["BATCH_REJECTED", "BatchActivities"]


class BatchActivities(SubmitActivities, WatchActivities, CollectActivities, ApplyActivities):
    """Message Batches activities; built as ``BatchActivities(pool, client)`` in worker.py.

    open_batch_run, submit_round, poll_round, cancel_round, collect_round, apply_round.
    """
