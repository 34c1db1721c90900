"""A scripted stand-in for Postgres and Claude, registered under the real activity names.

:class:`FakeWorld` keeps what the real activities keep in Postgres (which blocks are done,
failed and why, the splits, whether the run is cancelling) and answers each activity the
way the real one would, from a small script: ``{pack_path: [step, step, ...]}`` for sync
calls (a pack with no script left is answered in full) and ``{round: BatchRound(...)}``
for provider batch rounds. Errors are raised exactly as the real activities raise them,
``application_error(classify(...))``, so retry policies and non-retryable types apply.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from temporalio import activity

from activities.errors import application_error
from blockbatch.core.batch_types import (
    ApplyRoundInput,
    ApplyRoundOutput,
    BatchCounts,
    BatchOptions,
    BatchRoundInput,
    CollectRoundOutput,
    OpenBatchRunInput,
    OpenBatchRunOutput,
    PollRoundOutput,
    ProviderBatchRef,
    SubmitRoundOutput,
)
from blockbatch.core.call_types import (
    ApplyResultsInput,
    ApplyResultsOutput,
    CallModelInput,
    CallModelOutput,
    CallOutcome,
    FailBlocksInput,
    FailBlocksOutput,
    RecordSplitInput,
    Totals,
    WarmCacheInput,
    WarmCacheOutput,
)
from blockbatch.core.claude_errors import ClaudeError, classify
from blockbatch.core.outage_types import ProbeApiInput, ProbeApiOutput
from blockbatch.core.policy import attempt_limit
from blockbatch.core.quality_types import QualityProbeInput, QualityProbeOutput
from blockbatch.core.run_types import (
    FinishRunInput,
    MarkCancellingInput,
    PlanRunInput,
    PlanRunOutput,
    ReplanInput,
    ReplanOutput,
    RunResult,
)
from tests.waiting import until

TRUNCATED = "answer truncated (max_tokens)"
OUTAGE = classify(503, "api_error", "Service unavailable")
UNREACHABLE = classify(
    None, "APIConnectionError", "connection refused ([Errno 111])", host="127.0.0.1:9"
)
RATE_LIMITED = classify(429, "rate_limit_error", "Number of requests has exceeded your rate limit")
OVERLOADED = classify(529, "overloaded_error", "Overloaded")
KEY_REJECTED = classify(401, "authentication_error", "invalid x-api-key")
SPEND_CAP = classify(
    429,
    "rate_limit_error",
    "You have reached the monthly API usage threshold of your tier",
    error_code="enforced_spend_limit_reached",
)
BILLING = classify(402, "billing_error", "Your credit balance is too low")


@dataclass
class Answer:
    """Claude answered; ``apply_results`` fails the first ``failed`` blocks, completes the
    next ``ok`` (``None``: all the rest) and leaves the rest remaining with ``reason``."""

    ok: int | None = None
    failed: int = 0
    reason: str = TRUNCATED
    #: The model refused (``stop_reason: refusal``) with this category: nothing is done;
    #: like the real ``apply_results``, a lone block fails at once (``attempt_limit``),
    #: a pack's blocks all remain (a mapping failure, no attempt charged).
    refused: str | None = None


@dataclass
class Outcome:
    """``call_model`` returns an outcome other than an answer (overflow, oversized, ...)."""

    outcome: CallOutcome
    message: str | None = None
    #: The classified error the real call_model attaches to a ``request_error``.
    error: ClaudeError | None = None


@dataclass
class Raise:
    """``call_model`` raises this classified error, ``times`` attempts (``None``: always)."""

    error: ClaudeError
    times: int | None = None


@dataclass
class Hold:
    """``call_model`` is in flight until the test releases it (``"released"``) or the run
    is marked cancelling (``"cancelling"``), then does ``then``. Without ``then``: an
    answer once released; ``cancelled`` once cancelling (a call queued behind that lock)."""

    until: Literal["released", "cancelling"]
    then: Answer | Outcome | None = None


Step = Answer | Outcome | Raise | Hold


@dataclass
class Outage:
    """Claude is down (every call 503) from the ``after_calls``-th answered call until
    ``probes_down`` probes went unanswered; ``hold_probe``: the first probe waits for
    ``FakeWorld.release`` (the test looks at the paused run meanwhile)."""

    after_calls: int = 0
    probes_down: int = 2
    hold_probe: bool = False
    down: bool = False
    #: What an unanswered probe says of an endpoint no connection reaches and that never
    #: answered the run (``ProbeApiOutput.unreachable``); ``None``: Claude answers 503.
    unreachable: str | None = None
    failed_calls: int = 0
    probes: int = 0
    #: Pack paths whose call started while the run was paused (must stay empty).
    started_while_paused: list[str] = field(default_factory=list)


@dataclass
class BatchRound:
    """One provider batch round: which planned packs' requests errored or expired, after
    how many looks the batch ends (``None``: only once canceled) and which packs had
    succeeded when it was canceled."""

    errored: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    polls: int | None = 2
    done_before_cancel: list[str] = field(default_factory=list)


@dataclass
class Split:
    pack_path: str
    child_paths: list[str]
    reason: str
    block_count: int


class FakeWorld:
    """Postgres and Claude for one run, in memory; its methods are the activities."""

    def __init__(
        self,
        run_id: str,
        pack_sizes: list[int],
        script: dict[str, list[Step]] | None = None,
        *,
        mode: Literal["sync", "batch"] = "sync",
        rounds: dict[int, BatchRound] | None = None,
        hold_plan: bool = False,
        hold_finish: bool = False,
        outage: Outage | None = None,
        learning: bool = False,
        replan_sizes: list[int] | None = None,
        agrees_up_to: int | None = None,
    ) -> None:
        self.run_id = run_id
        #: plan_run says pack 0 is a learning pack; replan_run then regroups the blocks of
        #: the unstarted packs into packs of ``replan_sizes`` (once).
        self.learning = learning
        self.replan_sizes = replan_sizes
        self.replans: list[ReplanInput] = []
        #: The quality gate: blocks it re-asked, and the blocks of started packs still
        #: unanswered when it re-planned (each time).
        self.reasked: list[str] = []
        self.gate_saw_pending: list[int] = []
        self.plan_changes: list[str] = []
        #: The quality probe: a probed block's packed and single answers agree when its
        #: pack has at most ``agrees_up_to`` blocks (``None``: always); ``probes`` records
        #: each probe_quality call; ``probe_error`` makes every attempt fail.
        self.agrees_up_to = agrees_up_to
        self.probes: list[QualityProbeInput] = []
        self.probe_error: ClaudeError | None = None
        self.mode = mode
        self.packs = {i: [f"b{i}-{j}" for j in range(n)] for i, n in enumerate(pack_sizes)}
        self.script = {path: list(steps) for path, steps in (script or {}).items()}
        self.rounds = rounds or {}
        self.hold_plan = hold_plan
        self.hold_finish = hold_finish
        self.outage = outage
        self.done: set[str] = set()
        self.failed: dict[str, str] = {}
        #: Blocks apply_results failed as refused (code ``refused``).
        self.refused: set[str] = set()
        self.splits: list[Split] = []
        self.calls: list[CallModelInput] = []
        #: Each call's heartbeat timeout, by pack path: how soon a lost worker is noticed.
        self.heartbeat_timeouts: dict[str, float | None] = {}
        #: Each pack's apply_results start-to-close timeout, by pack path.
        self.db_timeouts: dict[str, float | None] = {}
        #: When each attempt of a pack's call started, by the server's clock (which the
        #: time-skipping server moves): the backoffs between them.
        self.attempts_at: dict[str, list[datetime]] = {}
        self.paid_calls = 0
        self.warm_ups = 0
        #: The warm-up call fails with this (every attempt) when set.
        self.warm_error: ClaudeError | None = None
        #: The run's budget cannot hold the warm-up call.
        self.warm_over_budget = False
        #: Batch mode: packs the run's budget cuts from a round (their blocks fail).
        self.budget_cut: dict[int, list[str]] = {}
        self.cancelling: str | None = None
        self.finished: FinishRunInput | None = None
        # The test watches and steers in-flight work with these.
        self.in_flight = asyncio.Event()
        self.holding: set[str] = set()  # pack paths whose call is held in flight
        self.release = asyncio.Event()
        self.cancel_marked = asyncio.Event()
        # Provider batch rounds: members are pack paths; resubmits per pack path.
        self.round_members: dict[int, list[str]] = {}
        #: The rounds whose pre-warm (``prewarm_round``) ran, in order.
        self.prewarmed: list[int] = []
        self.resubmits: dict[str, int] = {}
        self.polls: dict[int, int] = {}
        self.canceled_rounds: list[int] = []
        self.applied: list[ApplyRoundInput] = []
        self._answers: dict[int, tuple[list[str], Answer]] = {}
        self._call_ids = itertools.count(1)

    # ------------------------------------------------------------ what the test reads

    @property
    def uids(self) -> list[str]:
        return [u for blocks in self.packs.values() for u in blocks]

    async def held(self, *paths: str) -> None:
        """Wait until the calls of ``paths`` are all held in flight."""
        await until(lambda: self.holding.issuperset(paths), f"{paths} held", interval=0.02)

    def called_paths(self) -> list[str]:
        """Pack paths in the order their first call_model attempt arrived."""
        return list(dict.fromkeys(c.pack_path for c in self.calls))

    def activities(self) -> list[Callable[..., Any]]:
        return [
            self.plan_run,
            self.replan_run,
            self.apply_results,
            self.fail_blocks,
            self.record_split,
            self.mark_run_cancelling,
            self.finish_run,
            self.call_model,
            self.probe_api,
            self.warm_cache,
            self.probe_quality,
            self.open_batch_run,
            self.prewarm_round,
            self.submit_round,
            self.poll_round,
            self.cancel_round,
            self.collect_round,
            self.apply_round,
        ]

    def _pending(self, uids: list[str]) -> list[str]:
        return [u for u in uids if u not in self.done and u not in self.failed]

    def _pack_blocks(self, path: str) -> list[str]:
        return self.packs[int(path.split(".")[0])]

    # ------------------------------------------------------------ DbActivities

    @activity.defn(name="plan_run")
    async def plan_run(self, inp: PlanRunInput) -> PlanRunOutput:
        if self.hold_plan:
            self.in_flight.set()
            await self.release.wait()
        return PlanRunOutput(
            pack_count=len(self.packs),
            block_count=len(self.uids),
            mode=self.mode,
            learning=self.learning,
            replans=self.learning,
        )

    @activity.defn(name="replan_run")
    async def replan_run(self, inp: ReplanInput) -> ReplanOutput:
        self.replans.append(inp)
        if inp.gate is not None:  # the quality gate: half the largest unstarted pack
            # Blocks of the started packs not answered yet (packs in flight) as it saw them.
            self.gate_saw_pending.append(
                sum(len(self._pending(b)) for i, b in self.packs.items() if i < inp.first_pack)
            )
            was = max(len(b) for i, b in self.packs.items() if i >= inp.first_pack)
            size = max(1, was // 2)
            if inp.reask:  # like reask_for_gate: answered in larger packs, asked again
                again = [
                    u
                    for i, b in self.packs.items()
                    if i < inp.first_pack and len(b) > size
                    for u in b
                    if u in self.done
                ]
                for i in [i for i in self.packs if i < inp.first_pack]:
                    self.packs[i] = [u for u in self.packs[i] if u not in again]
                self.done.difference_update(again)
                self.reasked += again
                self.packs[inp.first_pack] = again + self.packs[inp.first_pack]
            rest = [u for i, blocks in self.packs.items() if i >= inp.first_pack for u in blocks]
            self.replan_sizes = [size] * (len(rest) // size) + (
                [len(rest) % size] if len(rest) % size else []
            )
            out = await self.replan_run(inp.model_copy(update={"gate": None}))
            self.replans.pop()
            text = f"quality gate: packs re-planned at {size} blocks (was {was})"
            self.plan_changes[-1] = text
            return out.model_copy(update={"pack_size": size, "text": text})
        sizes, self.replan_sizes = self.replan_sizes, None
        if sizes is None:
            return ReplanOutput(pack_count=len(self.packs))
        rest = [u for i, blocks in self.packs.items() if i >= inp.first_pack for u in blocks]
        assert sum(sizes) == len(rest), "replan_sizes must cover the unstarted blocks"
        before = len(self.packs)
        for i in [i for i in self.packs if i >= inp.first_pack]:
            del self.packs[i]
        for n, size in enumerate(sizes):
            self.packs[inp.first_pack + n] = rest[:size]
            rest = rest[size:]
        text = (
            f"packs {inp.first_pack}-{before - 1} re-planned as "
            f"{inp.first_pack}-{len(self.packs) - 1}"
        )
        self.plan_changes.append(text)
        return ReplanOutput(pack_count=len(self.packs), text=text)

    @activity.defn(name="apply_results")
    async def apply_results(self, inp: ApplyResultsInput) -> ApplyResultsOutput:
        timeout = activity.info().start_to_close_timeout
        self.db_timeouts[inp.pack_path] = timeout.total_seconds() if timeout else None
        uids, answer = self._answers[inp.call_id]
        uids = self._pending(uids)  # idempotent, like the real one
        if answer.refused is not None:
            reason = f"the model refused the request ({answer.refused})"
            if attempt_limit(len(uids), True, inp.max_block_attempts) <= 1:
                self.failed.update(dict.fromkeys(uids, reason))
                self.refused.update(uids)
                return ApplyResultsOutput(completed=0, failed=uids, reason=reason)
            return ApplyResultsOutput(
                completed=0, remaining=uids, mapping_failed=True, reason=reason
            )
        failed = uids[: answer.failed]
        rest = uids[answer.failed :]
        ok = rest if answer.ok is None else rest[: answer.ok]
        remaining = rest[len(ok) :]
        self.done.update(ok)
        for uid in failed:
            self.failed[uid] = "attempts used up"
        return ApplyResultsOutput(
            completed=len(ok),
            failed=failed,
            remaining=remaining,
            reason=answer.reason if remaining else "",
        )

    @activity.defn(name="fail_blocks")
    async def fail_blocks(self, inp: FailBlocksInput) -> FailBlocksOutput:
        uids = self._pending(
            inp.block_uids if inp.block_uids is not None else self.packs[inp.pack_index]
        )
        for uid in uids:
            self.failed[uid] = inp.reason
        return FailBlocksOutput(failed=len(uids))

    @activity.defn(name="record_split")
    async def record_split(self, inp: RecordSplitInput) -> None:
        if all(s.pack_path != inp.pack_path for s in self.splits):  # retried: once
            self.splits.append(Split(inp.pack_path, inp.child_paths, inp.reason, inp.block_count))

    @activity.defn(name="mark_run_cancelling")
    async def mark_run_cancelling(self, inp: MarkCancellingInput) -> None:
        self.cancelling = self.cancelling or inp.reason
        self.cancel_marked.set()

    @activity.defn(name="finish_run")
    async def finish_run(self, inp: FinishRunInput) -> RunResult:
        self.finished = inp
        if self.hold_finish:
            self.in_flight.set()
            await self.release.wait()
        total = len(self.uids)
        if inp.status == "budget_exhausted":  # like end_pending: the rest end failed
            for uid in self._pending(self.uids):
                self.failed[uid] = "the run's budget ran out before this block was sent"
        pending = total - len(self.done) - len(self.failed)
        return RunResult(
            run_id=inp.run_id,
            status=inp.status,
            error=inp.error,
            blocks_total=total,
            blocks_ai_complete=len(self.done),
            blocks_failed=len(self.failed),
            blocks_cancelled=pending if inp.status != "completed" else 0,
            pack_count=len(self.packs),
            calls=self.paid_calls,
            split_events=len(self.splits),
            plan_changes=self.plan_changes,
        )

    # ------------------------------------------------------------ LlmActivities

    def _next_step(self, path: str) -> Step:
        steps = self.script.get(path)
        if not steps:
            return Answer()
        step = steps[0]
        if isinstance(step, Raise) and step.times is not None:
            step.times -= 1
            if step.times <= 0:
                steps.pop(0)
        elif not isinstance(step, Raise):
            steps.pop(0)
        return step

    @activity.defn(name="call_model")
    async def call_model(self, inp: CallModelInput) -> CallModelOutput:
        self.calls.append(inp)
        timeout = activity.info().heartbeat_timeout
        self.heartbeat_timeouts[inp.pack_path] = timeout.total_seconds() if timeout else None
        at = activity.info().started_time
        self.attempts_at.setdefault(inp.pack_path, []).append(at)
        uids = self._pending(
            inp.block_uids if inp.block_uids is not None else self.packs[inp.pack_index]
        )
        if self.cancelling:
            return CallModelOutput(
                outcome="cancelled", block_uids=uids, message="run is cancelling"
            )
        if not uids:
            return CallModelOutput(outcome="empty", block_uids=[])
        step = self._next_step(inp.pack_path)
        if isinstance(step, Hold):
            self.holding.add(inp.pack_path)
            self.in_flight.set()
            await _heartbeating(self.release if step.until == "released" else self.cancel_marked)
            if step.then is None and step.until == "cancelling":
                return CallModelOutput(
                    outcome="cancelled", block_uids=uids, message="run is cancelling"
                )
            step = step.then or Answer()
        if self.outage is not None and self.outage.down:
            if self.outage.unreachable is not None:
                self.outage.failed_calls += 1
                give_up = (
                    inp.outage_attempts is not None
                    and activity.info().attempt >= inp.outage_attempts
                )
                raise application_error(UNREACHABLE, give_up=give_up)
            first_call = sum(c.pack_path == inp.pack_path for c in self.calls) == 1
            if self.outage.probes and first_call:
                self.outage.started_while_paused.append(inp.pack_path)
            step = Raise(OUTAGE)
        if isinstance(step, Raise):
            # Like the real call_model: Claude down that often hands back to the run.
            give_up = (
                inp.outage_attempts is not None and activity.info().attempt >= inp.outage_attempts
            )
            if self.outage is not None:
                self.outage.failed_calls += 1
            raise application_error(step.error, give_up=give_up)
        if isinstance(step, Outcome):
            return CallModelOutput(
                outcome=step.outcome, block_uids=uids, message=step.message, error=step.error
            )
        call_id = next(self._call_ids)
        self._answers[call_id] = (uids, step)
        self.paid_calls += 1
        if self.outage is not None and self.paid_calls == self.outage.after_calls:
            self.outage.down = True
        return CallModelOutput(
            outcome="answered",
            block_uids=uids,
            call_id=call_id,
            stop_reason="max_tokens" if step.ok is not None else "end_turn",
            input_tokens=100 * len(uids),
            output_tokens=50 * len(uids),
            cost_usd=0.001 * len(uids),
        )

    @activity.defn(name="probe_quality")
    async def probe_quality(self, inp: QualityProbeInput) -> QualityProbeOutput:
        self.probes.append(inp)
        if self.probe_error is not None:
            raise application_error(self.probe_error)
        blocks = [u for u in self.packs[inp.pack_index] if u in self.done]
        sampled = min(len(blocks), max(inp.at_least, 1))
        agree = self.agrees_up_to is None or len(self.packs[inp.pack_index]) <= self.agrees_up_to
        agreeing = sampled if agree else 0
        return QualityProbeOutput(
            sampled=sampled,
            agreeing=agreeing,
            totals=Totals(
                calls=sampled,
                cost_usd=0.0001 * sampled,
                quality_calls=sampled,
                quality_cost_usd=0.0001 * sampled,
                quality_sampled=sampled,
                quality_agreeing=agreeing,
            ),
        )

    @activity.defn(name="warm_cache")
    async def warm_cache(self, inp: WarmCacheInput) -> WarmCacheOutput:
        self.warm_ups += 1
        if self.warm_error is not None:
            raise application_error(self.warm_error)
        if self.warm_over_budget:
            return WarmCacheOutput(called=False, over_budget=True)
        return WarmCacheOutput(called=True, call_id=0)

    @activity.defn(name="probe_api")
    async def probe_api(self, inp: ProbeApiInput) -> ProbeApiOutput:
        outage = self.outage
        if outage is None:  # a scripted error that never ends: Claude stays down
            return ProbeApiOutput(up=False, message=OUTAGE.describe(), call_id=0)
        outage.probes += 1
        if outage.hold_probe and outage.probes == 1:
            self.in_flight.set()
            await _heartbeating(self.release)
        if outage.probes > outage.probes_down:
            outage.down = False
            return ProbeApiOutput(up=True, message="Claude answered", call_id=0, cost_usd=0.0001)
        if outage.unreachable is not None:
            return ProbeApiOutput(
                up=False,
                message=UNREACHABLE.describe(),
                call_id=0,
                unreachable=outage.unreachable,
            )
        return ProbeApiOutput(up=False, message=OUTAGE.describe(), call_id=0)

    # ------------------------------------------------------------ BatchActivities

    @activity.defn(name="open_batch_run")
    async def open_batch_run(self, inp: OpenBatchRunInput) -> OpenBatchRunOutput:
        self.round_members.setdefault(1, [str(i) for i in self.packs])
        return OpenBatchRunOutput(
            options=BatchOptions(poll_initial_s=60, poll_max_s=600, max_resubmits=2),
            requests=len(self.packs),
            blocks=len(self.uids),
        )

    @activity.defn(name="prewarm_round")
    async def prewarm_round(self, inp: BatchRoundInput) -> WarmCacheOutput:
        self.prewarmed.append(inp.round)
        return WarmCacheOutput(called=False)

    @activity.defn(name="submit_round")
    async def submit_round(self, inp: BatchRoundInput) -> SubmitRoundOutput:
        members = self.round_members.get(inp.round, [])
        if self.cancelling:
            return SubmitRoundOutput(refused=True)
        over_budget = 0
        for path in self.budget_cut.pop(inp.round, []):  # like fit_budget
            members.remove(path)
            for uid in self._pending(self._pack_blocks(path)):
                self.failed[uid] = "the run's budget cannot hold this request"
                over_budget += 1
        if not members:
            return SubmitRoundOutput(over_budget=over_budget)
        return SubmitRoundOutput(
            batches=[
                ProviderBatchRef(
                    part=0, provider_batch_id=f"msgbatch_r{inp.round}", requests=len(members)
                )
            ],
            requests=len(members),
            over_budget=over_budget,
        )

    def _counts(self, round_: int) -> BatchCounts:
        script = self.rounds.get(round_, BatchRound())
        members = self.round_members.get(round_, [])
        if round_ in self.canceled_rounds:
            ok = [m for m in members if m in script.done_before_cancel]
            return BatchCounts(succeeded=len(ok), canceled=len(members) - len(ok))
        errored = [m for m in members if m in script.errored]
        expired = [m for m in members if m in script.expired]
        return BatchCounts(
            succeeded=len(members) - len(errored) - len(expired),
            errored=len(errored),
            expired=len(expired),
        )

    @activity.defn(name="poll_round")
    async def poll_round(self, inp: BatchRoundInput) -> PollRoundOutput:
        self.polls[inp.round] = self.polls.get(inp.round, 0) + 1
        script = self.rounds.get(inp.round, BatchRound())
        self.in_flight.set()  # the round is being waited for
        if inp.round in self.canceled_rounds:
            return PollRoundOutput(counts=self._counts(inp.round), statuses=["ended"], ended=True)
        if script.polls is None or self.polls[inp.round] < script.polls:
            return PollRoundOutput(
                counts=BatchCounts(processing=len(self.round_members[inp.round])),
                statuses=["in_progress"],
                ended=False,
            )
        return PollRoundOutput(counts=self._counts(inp.round), statuses=["ended"], ended=True)

    @activity.defn(name="cancel_round")
    async def cancel_round(self, inp: BatchRoundInput) -> PollRoundOutput:
        if inp.round not in self.canceled_rounds:
            self.canceled_rounds.append(inp.round)
        return PollRoundOutput(
            counts=BatchCounts(processing=len(self.round_members[inp.round])),
            statuses=["canceling"],
            ended=False,
        )

    @activity.defn(name="collect_round")
    async def collect_round(self, inp: BatchRoundInput) -> CollectRoundOutput:
        counts = self._counts(inp.round)
        return CollectRoundOutput(counts=counts, totals=Totals(calls=counts.succeeded))

    @activity.defn(name="apply_round")
    async def apply_round(self, inp: ApplyRoundInput) -> ApplyRoundOutput:
        self.applied.append(inp)
        script = self.rounds.get(inp.round, BatchRound())
        out = ApplyRoundOutput()
        nxt: list[str] = []
        for path in self.round_members.get(inp.round, []):
            blocks = self._pending(self._pack_blocks(path))
            canceled = inp.round in self.canceled_rounds
            if (canceled and path in script.done_before_cancel) or (
                not canceled and path not in script.errored + script.expired
            ):
                self.done.update(blocks)
                out.completed += len(blocks)
                self.paid_calls += 1
            elif not canceled:
                self.resubmits[path] = self.resubmits.get(path, 0) + 1
                if self.resubmits[path] > inp.max_resubmits:
                    for uid in blocks:
                        self.failed[uid] = "errored or expired too often"
                    out.failed += len(blocks)
                elif inp.schedule_next:
                    out.resubmitted += 1
                    nxt.append(path)
        if nxt:
            self.round_members[inp.round + 1] = nxt
        out.next_requests = len(nxt)
        out.next_blocks = sum(len(self._pack_blocks(p)) for p in nxt)
        out.packs_done = sum(1 for blocks in self.packs.values() if not self._pending(blocks))
        return out


async def _heartbeating(event: asyncio.Event) -> None:
    """Wait for ``event`` while heartbeating, as the real ``call_model`` does."""
    while True:
        activity.heartbeat()
        try:
            await asyncio.wait_for(event.wait(), 1)
            return
        except TimeoutError:
            pass
