"""A worker's Prometheus endpoint: Temporal's own metrics and blockbatch's, in one scrape.

With ``METRICS_PORT`` set, ``worker.py`` connects to Temporal through a
``temporalio.runtime.Runtime`` that serves Prometheus on ``METRICS_HOST:METRICS_PORT``
(``/metrics``). The SDK publishes its worker metrics there (task slots, poll and
schedule-to-start latencies, activity and workflow task outcomes), and blockbatch creates its
own instruments on that runtime's ``metric_meter``, so one endpoint serves both.

blockbatch's metrics are observed, not instrumented in place: :class:`MetricsInterceptor`
(an ``ActivityInboundInterceptor`` that ``build_worker`` installs whenever the client's
runtime has a metrics meter) reads each activity's typed input, output or
``ApplicationError`` after it ran, and maps it to counters here. What the metrics count is
what the activities returned to Temporal: each output carries the facts where they are
known (the calls a warm-up or probe made as ``CallFacts``, the reason codes of the blocks
an activity failed, the blocks a closing run ended), so counting reads nothing back.
Observing never fails an activity: an error while counting is logged and the result is
returned unchanged.

Counts are per worker process since it started (Prometheus counters); sum them over the
fleet's workers. Labels are few and bounded (purpose, status, kind, reason code, limit):
never a run id, block uid, pack path or anything from a request, and never the API key.
The names and labels are listed in :data:`METRICS` and in the README's table.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.common import MetricMeter
from temporalio.exceptions import ApplicationError
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from activities.errors import call_of_error as failed_call
from activities.errors import claude_error_of
from blockbatch.core.batch_types import ApplyRoundOutput, CollectRoundOutput, OpenBatchRunOutput
from blockbatch.core.call_types import (
    ApplyResultsOutput,
    CallFacts,
    CallModelOutput,
    FailBlocksInput,
    FailBlocksOutput,
    LimiterNote,
    WarmCacheOutput,
)
from blockbatch.core.outage_types import ProbeApiOutput
from blockbatch.core.outcome import end_code
from blockbatch.core.policy import failure_code
from blockbatch.core.quality_types import QualityProbeOutput
from blockbatch.core.run_types import FinishRunInput, RunResult

log = logging.getLogger("blockbatch.metrics")

#: Token kinds, as the ``kind`` label names them, and the usage field each one counts.
TOKEN_KINDS: dict[str, str] = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cache_read": "cache_read_input_tokens",
    "cache_write": "cache_creation_input_tokens",
}


@dataclass(frozen=True)
class Metric:
    """One of blockbatch's metrics as Prometheus shows it."""

    name: str
    type: str
    labels: tuple[str, ...]
    help: str


#: Every blockbatch metric. The README's table lists the same names and labels;
#: ``tests/unit/test_metrics.py`` checks that the two agree.
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric(
            "blockbatch_llm_calls_total",
            "counter",
            ("purpose", "status"),
            "Claude calls made, as the ledger records them: purpose `pack`, `warm_up`, "
            "`probe`, `batch_request`; status `succeeded` or `failed`",
        ),
        Metric(
            "blockbatch_llm_tokens_total",
            "counter",
            ("purpose", "kind"),
            "tokens of those calls by kind: `input`, `output`, `cache_read`, `cache_write`",
        ),
        Metric(
            "blockbatch_llm_cost_microdollars_total",
            "counter",
            ("purpose",),
            "their cost in millionths of a US dollar (batch requests at batch prices)",
        ),
        Metric(
            "blockbatch_api_errors_total",
            "counter",
            ("status",),
            "error answers from Claude to calls and batch management calls: `429`, `529`, "
            "`5xx`, `4xx`, `no_answer` (timeout, connection)",
        ),
        Metric(
            "blockbatch_splits_total",
            "counter",
            (),
            "packs halved (max_tokens, an unparseable answer, a mapping failure, a refusal)",
        ),
        Metric(
            "blockbatch_blocks_done_total",
            "counter",
            (),
            "blocks whose result was written to staging (`ai_complete`)",
        ),
        Metric(
            "blockbatch_blocks_failed_total",
            "counter",
            ("reason",),
            "blocks that ended `failed`, by reason code",
        ),
        Metric(
            "blockbatch_blocks_cancelled_total",
            "counter",
            ("reason",),
            "blocks that ended `cancelled`, by reason code (`cancelled`, `key_rejected`)",
        ),
        Metric(
            "blockbatch_runs_finished_total",
            "counter",
            ("status",),
            "run executions finished: `completed`, `completed_with_failures`, `failed`, "
            "`cancelled`, `budget_exhausted`",
        ),
        Metric(
            "blockbatch_limiter_rate",
            "gauge",
            (),
            "the share of the limits the fleet's rate limiter admits now (AIMD: halved on "
            "a 429, regained slowly), as this worker's latest answered call saw it",
        ),
        Metric(
            "blockbatch_limiter_limit",
            "gauge",
            ("limit",),
            "the per-minute limits the limiter works with: `requests`, `input` and `output` tokens",
        ),
        Metric(
            "blockbatch_limiter_learned",
            "gauge",
            (),
            "1 once an answer's rate-limit headers taught the limits, 0 while assumed",
        ),
        Metric(
            "blockbatch_limiter_runs",
            "gauge",
            (),
            "runs that shared the limiter in the last minute",
        ),
        Metric(
            "blockbatch_limiter_waits_total",
            "counter",
            ("binding",),
            "calls that waited for the limiter, by the limit waited for: `requests`, "
            "`input`, `output`, `fair_share`",
        ),
        Metric(
            "blockbatch_limiter_wait_seconds",
            "histogram",
            (),
            "how long each answered call waited for the limiter",
        ),
    )
}

#: Bucket bounds (seconds) of ``blockbatch_limiter_wait_seconds``.
WAIT_BUCKETS_S = (0.05, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class MetricsUnavailable(RuntimeError):
    """The metrics endpoint could not be started; the message says what to do."""


def metrics_runtime(host: str, port: int) -> Runtime:
    """A Temporal runtime that serves Prometheus metrics on ``host:port`` (``/metrics``).

    Raises:
        MetricsUnavailable: the address cannot be bound (in use, not a local address).
    """
    address = f"{host}:{port}"
    try:
        return Runtime(
            telemetry=TelemetryConfig(
                # Prometheus names the worker (job, instance); "temporal-core-sdk" on every
                # sample, blockbatch's included, would say nothing.
                attach_service_name=False,
                metrics=PrometheusConfig(
                    bind_address=address,
                    counters_total_suffix=True,
                    histogram_bucket_overrides={"blockbatch_limiter_wait_seconds": WAIT_BUCKETS_S},
                ),
            )
        )
    except (ValueError, RuntimeError) as exc:
        raise MetricsUnavailable(
            f"cannot serve metrics on {address} ({exc}); set METRICS_PORT to a free port "
            "(each worker on a machine needs its own), or unset it to turn metrics off"
        ) from exc


def metric_meter(client: Client) -> MetricMeter | None:
    """The metrics meter of ``client``'s runtime; ``None`` when it has none (metrics off)."""
    runtime = client.service_client.config.runtime or Runtime.default()
    meter = runtime.metric_meter
    return None if meter is MetricMeter.noop else meter


# ------------------------------------------------------------------ pure mapping


def status_class(status: int | None) -> str:
    """The ``status`` label of an API error: ``429``, ``529``, ``5xx``, ``4xx``, ``no_answer``."""
    if status is None:
        return "no_answer"
    if status in (429, 529):
        return str(status)
    if status >= 500:
        return "5xx"
    if status >= 400:
        return "4xx"
    return "other"


@dataclass(frozen=True)
class Call:
    """One Claude call as the metrics count it."""

    purpose: str
    #: ``succeeded`` or ``failed``, as the ledger has it.
    status: str
    tokens: Mapping[str, int] = field(default_factory=dict)
    cost_usd: float = 0.0
    #: The ``status`` label of the error answer, when there was one.
    error: str | None = None
    #: How many calls this is (a batch round reports its requests together).
    count: int = 1


def call_of_facts(purpose: str, facts: CallFacts) -> Call:
    """The call an activity reported (``CallFacts``) as the metrics count it (a failed
    call's tokens are none)."""
    answered = facts.status == "succeeded"
    return Call(
        purpose,
        facts.status,
        tokens={kind: getattr(facts, f) for kind, f in TOKEN_KINDS.items()} if answered else {},
        cost_usd=facts.cost_usd,
        error=status_class(facts.http_status) if facts.api_error else None,
    )


def call_of_output(out: CallModelOutput) -> Call | None:
    """The call a ``call_model`` output reports; ``None`` when no new call was made
    (a reused answer, an oversized pack, a cancelling run, no blocks left)."""
    facts = CallFacts.of_output(out)
    return None if facts is None else call_of_facts("pack", facts)


def call_of_error(purpose: str, err: BaseException) -> Call | None:
    """The call a failed ``call_model`` / ``warm_cache`` attempt made, from its error
    (``activities.errors.call_of_error``); ``None`` when it made none."""
    facts = failed_call(err)
    return None if facts is None else call_of_facts(purpose, facts)


def batch_calls(out: CollectRoundOutput) -> list[Call]:
    """A collected batch round's calls: its answered requests (with the round's tokens and
    cost) and its errored or expired ones (in the ledger as ``failed``; a canceled request
    is ``abandoned`` there and not counted)."""
    t = out.totals
    return [
        Call(
            "batch_request",
            "succeeded",
            {kind: getattr(t, f) for kind, f in TOKEN_KINDS.items()},
            t.cost_usd,
            count=out.counts.succeeded,
        ),
        Call("batch_request", "failed", count=out.counts.errored + out.counts.expired),
    ]


# ------------------------------------------------------------------ instruments


class BlockbatchMetrics:
    """blockbatch's instruments on one meter (the worker's runtime's)."""

    def __init__(self, meter: MetricMeter) -> None:
        def about(name: str) -> str:
            return METRICS[name].help.replace("`", "")

        def counter(name: str) -> Any:
            # The runtime appends ``_total`` to counters (counters_total_suffix).
            return meter.create_counter(name.removesuffix("_total"), about(name))

        self._calls = counter("blockbatch_llm_calls_total")
        self._tokens = counter("blockbatch_llm_tokens_total")
        self._cost = counter("blockbatch_llm_cost_microdollars_total")
        self._api_errors = counter("blockbatch_api_errors_total")
        self._splits = counter("blockbatch_splits_total")
        self._done = counter("blockbatch_blocks_done_total")
        self._failed = counter("blockbatch_blocks_failed_total")
        self._cancelled = counter("blockbatch_blocks_cancelled_total")
        self._runs = counter("blockbatch_runs_finished_total")
        self._waits = counter("blockbatch_limiter_waits_total")
        self._rate = meter.create_gauge_float(
            "blockbatch_limiter_rate", about("blockbatch_limiter_rate")
        )
        self._limit = meter.create_gauge(
            "blockbatch_limiter_limit", about("blockbatch_limiter_limit")
        )
        self._learned = meter.create_gauge(
            "blockbatch_limiter_learned", about("blockbatch_limiter_learned")
        )
        self._sharing = meter.create_gauge(
            "blockbatch_limiter_runs", about("blockbatch_limiter_runs")
        )
        self._wait = meter.create_histogram_float(
            "blockbatch_limiter_wait_seconds", about("blockbatch_limiter_wait_seconds"), "s"
        )
        #: Cost per purpose in the ledger's unit (1e-8 USD, ``numeric(16, 8)``), summed as
        #: integers, and the micro-dollars counted of it so far: the counter stays within a
        #: micro-dollar below the ledger's sum, however many calls (no float drift).
        self._cost_units: dict[str, int] = {}
        self._cost_counted: dict[str, int] = {}

    def call(self, call: Call) -> None:
        if call.count:
            self._calls.add(call.count, {"purpose": call.purpose, "status": call.status})
        for kind, n in call.tokens.items():
            if n:
                self._tokens.add(n, {"purpose": call.purpose, "kind": kind})
        if call.cost_usd:
            p = call.purpose
            self._cost_units[p] = self._cost_units.get(p, 0) + round(call.cost_usd * 1e8)
            micro = self._cost_units[p] // 100 - self._cost_counted.get(p, 0)
            if micro > 0:
                self._cost.add(micro, {"purpose": p})
                self._cost_counted[p] = self._cost_counted.get(p, 0) + micro
        if call.error is not None:
            self.api_error(call.error)

    def api_error(self, status: str) -> None:
        self._api_errors.add(1, {"status": status})

    def splits(self, n: int) -> None:
        if n:
            self._splits.add(n)

    def blocks_done(self, n: int) -> None:
        if n:
            self._done.add(n)

    def blocks_failed(self, reasons: Mapping[str, int]) -> None:
        for reason, n in reasons.items():
            if n:
                self._failed.add(n, {"reason": reason})

    def blocks_cancelled(self, reasons: Mapping[str, int]) -> None:
        for reason, n in reasons.items():
            if n:
                self._cancelled.add(n, {"reason": reason})

    def run_finished(self, status: str) -> None:
        self._runs.add(1, {"status": status})

    def limiter(self, note: LimiterNote | None, wait_s: float) -> None:
        """One answered call's view of the fleet's limiter."""
        self._wait.record(wait_s)
        if note is None:
            return
        if note.binding is not None:
            self._waits.add(1, {"binding": note.binding})
        self._rate.set(note.rate)
        self._learned.set(1 if note.learned else 0)
        self._sharing.set(note.runs)
        for limit, value in note.limits.items():
            self._limit.set(value, {"limit": limit})


# ------------------------------------------------------------------ the interceptor


class MetricsInterceptor(Interceptor):
    """Counts what blockbatch's activities did (see the module docstring)."""

    def __init__(self, metrics: BlockbatchMetrics) -> None:
        self.metrics = metrics

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ObservedActivity(next, self.metrics)


#: The ledger purpose of the calls each calling activity makes.
_CALL_PURPOSE = {"call_model": "pack", "warm_cache": "warm_up", "probe_quality": "quality_probe"}


class _ObservedActivity(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, metrics: BlockbatchMetrics) -> None:
        super().__init__(next)
        self.metrics = metrics

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        name = activity.info().activity_type
        arg = input.args[0] if input.args else None
        try:
            result = await self.next.execute_activity(input)
        except ApplicationError as err:
            try:
                self._failed(name, err)
            except Exception as exc:  # noqa: BLE001 - counting never fails the work it counts
                _not_counted(name, exc)
            raise
        try:
            self._after(name, arg, result)
        except Exception as exc:  # noqa: BLE001 - counting never fails the work it counts
            _not_counted(name, exc)
        return result

    def _failed(self, name: str, err: ApplicationError) -> None:
        if name in _CALL_PURPOSE:
            call = call_of_error(_CALL_PURPOSE[name], err)
            if call is not None:
                self.metrics.call(call)
            return
        error = claude_error_of(err)  # batch management calls: not in the ledger
        if error is not None:
            self.metrics.api_error(status_class(error.status))

    def _after(self, name: str, arg: Any, out: Any) -> None:
        m = self.metrics
        if isinstance(out, CallModelOutput):
            call = call_of_output(out)
            if call is not None:
                m.call(call)
                if call.status == "succeeded":
                    m.limiter(out.limiter, out.limiter_wait_s)
        elif isinstance(out, WarmCacheOutput) and out.call is not None:
            m.call(call_of_facts("warm_up", out.call))
        elif isinstance(out, ProbeApiOutput) and out.call is not None:
            m.call(call_of_facts("probe", out.call))
        elif isinstance(out, QualityProbeOutput):
            for facts in out.calls:
                m.call(call_of_facts("quality_probe", facts))
        elif isinstance(out, CollectRoundOutput):
            for call in batch_calls(out):
                m.call(call)
        elif isinstance(out, ApplyResultsOutput):
            m.blocks_done(out.completed)
            m.blocks_failed(out.failed_reasons)
        elif isinstance(out, FailBlocksOutput) and isinstance(arg, FailBlocksInput):
            m.blocks_failed({failure_code(arg): out.failed})
        elif name == "record_split":
            m.splits(1)
        elif isinstance(out, ApplyRoundOutput):
            m.blocks_done(out.completed)
            m.splits(out.splits)
            m.blocks_failed(out.failed_reasons)
        elif isinstance(out, OpenBatchRunOutput):
            m.blocks_failed(out.failed_reasons)
        elif isinstance(out, RunResult) and isinstance(arg, FinishRunInput):
            if out.blocks_ended:
                ended: dict[str, int] = {end_code(arg.status, arg.error): out.blocks_ended}
                if arg.status in ("completed", "budget_exhausted"):
                    m.blocks_failed(ended)
                else:
                    m.blocks_cancelled(ended)
            m.run_finished(out.status)


def _not_counted(name: str, exc: Exception) -> None:
    log.warning("metrics of %s not counted: %s: %s", name, type(exc).__name__, exc)
