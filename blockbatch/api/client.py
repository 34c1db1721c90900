"""The :class:`Blockbatch` client: ingest, start, follow, review, confirm and export runs."""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Self, TextIO

import asyncpg
from pydantic import ValidationError
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.models import READ_TIMEOUT_S, ModelFacts
from blockbatch.api.answering import answering_endpoint
from blockbatch.api.budget import check_start_budget
from blockbatch.api.calibrate import prepare, run_calibration, run_model_calibration
from blockbatch.api.errors import (
    BadRequest,
    ModelRetiring,
    NothingToRetry,
    RetryRefused,
    RetryUnderWay,
    RunStillActive,
    TemporalUnavailable,
    parse_checked,
    speaks_python,
)
from blockbatch.api.inputs import SchemaSource, as_schema, with_schema_model
from blockbatch.api.pages import block_page_png
from blockbatch.api.parquet import export_parquet
from blockbatch.api.quote import Document, checked_model, estimate
from blockbatch.api.retry import CheckedRetry, RetryStarted, check_retry_request
from blockbatch.api.review import (
    ConfirmOutcome,
    EditOutcome,
    ExportFormat,
    ExportSummary,
    RejectOutcome,
    ReopenOutcome,
    confirm,
    edit,
    export_run_to_file,
    export_to,
    reject,
    reopen,
)
from blockbatch.api.streams import Stream, load_stream
from blockbatch.core.answer import check_effort
from blockbatch.core.calibration import (
    DEFAULT_MODELS_SAMPLE,
    DEFAULT_SAMPLE,
    DEFAULT_SIZES,
    DEFAULT_TARGET,
    Calibration,
    ModelCalibration,
)
from blockbatch.core.commands import PROG
from blockbatch.core.convert.limits import check_size
from blockbatch.core.endpoint import Endpoint, endpoint_of, mismatch_text
from blockbatch.core.escalation import ESCALATED_STATUSES
from blockbatch.core.ingest import ConvertOptions, ParsedBlock, detect_format, record_columns
from blockbatch.core.models import (
    EscalateInput,
    EscalationOptions,
    EscalationProgress,
    EscalationResult,
    QualityResult,
    RunOptions,
    RunProgress,
    RunResult,
    run_input,
    stream_input,
)
from blockbatch.core.quote import Quote
from blockbatch.core.reasons import counts_text
from blockbatch.core.registry import ModelInfo, retirement_warning
from blockbatch.core.review import id_columns as identifying_columns
from blockbatch.core.streams import StreamTriggers
from blockbatch.core.views import (
    UNFINISHED,
    CallDetail,
    CallRow,
    Disagreement,
    GridFilter,
    GridPage,
    LimiterView,
    RetryRecord,
    ReviewAction,
    ReviewActivity,
    ReviewPage,
    RunInfo,
)
from blockbatch.core.workflow_names import (
    NOTHING_TO_RETRY,
    RETRY_UNDER_WAY,
    RUN_NOT_FINISHED,
    escalate_workflow_id,
    run_workflow_id,
)
from blockbatch.runtime.claude import configured_client
from blockbatch.runtime.settings import Settings, load_settings
from blockbatch.runtime.temporal import connect, ensure_search_attributes
from blockbatch.store import (
    escalations,
    quality,
    ratelimits,
    reads,
    replans,
    repo,
    review,
    runs,
    workers,
)
from blockbatch.store import retries as retry_log
from blockbatch.store import streams as stream_store
from blockbatch.store.db import create_pool
from workflows import attributes
from workflows.escalate import EscalateWorkflow
from workflows.run import RunWorkflow
from workflows.stream import StreamWorkflow

#: How long a cancel waits for a polling worker to take its Update before it records the
#: request as a signal instead (seconds).
CANCEL_UPDATE_WAIT_S = 10.0


@dataclass(frozen=True)
class CancelRequest:
    """A cancel asked of a run: the run as it was, and whether the request waits for a worker.

    Attributes:
        info: the run as it was when asked.
        waits_for_worker: no worker took it: it is recorded in the run's workflow and is
            carried out when a worker polls ``task_queue``.
        task_queue: the run's task queue.
    """

    info: reads.RunInfo
    waits_for_worker: bool = False
    task_queue: str | None = None


@speaks_python
class Blockbatch:
    """One connection to Postgres and (lazily) Temporal; use as an async context manager.

    An error's advice names the next command as the ``blockbatch`` console script's and
    options as this API's parameters; a front door that words errors itself (the CLI) sets
    ``renders_errors`` to ``False`` and renders ``blockbatch.core.commands`` itself.
    """

    def __init__(self, pool: asyncpg.Pool, client: Client | None, settings: Settings) -> None:
        #: Word an error's advice for a Python caller (``blockbatch.api.errors.reword``).
        self.renders_errors = True
        self.pool = pool
        self._client = client
        self.settings = settings
        self._owns_pool = False
        #: Reads the Models API (its own anthropic client), made on first use.
        self._models: ModelFacts | None = None

    @classmethod
    async def connect(
        cls,
        settings: Settings | None = None,
        client: Client | None = None,
        *,
        temporal: bool = True,
        pool_size: int = 4,
    ) -> Blockbatch:
        """Connect to Postgres (migrating it) and, unless ``temporal=False``, to Temporal."""
        settings = settings or load_settings()
        pool = await create_pool(settings.resolved_database_url, max_size=pool_size)
        bb = cls(pool, client, settings)
        bb._owns_pool = True
        try:
            if temporal:
                await bb.temporal()
        except Exception:
            await pool.close()
            raise
        return bb

    async def temporal(self) -> Client:
        """The Temporal client, connecting on first use."""
        if self._client is None:
            self._client = await connect(self.settings)
        return self._client

    @property
    def client(self) -> Client:
        """The Temporal client once connected.

        Raises:
            TemporalUnavailable: :meth:`temporal` has not connected yet.
        """
        if self._client is None:
            raise TemporalUnavailable("not connected to Temporal yet: await bb.temporal() first")
        return self._client

    async def close(self) -> None:
        """Close the Models API client if one was made, and the Postgres pool if this
        client opened it."""
        if self._models is not None:
            await self._models.client.close()
            self._models = None
        if self._owns_pool:
            await self.pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ inputs

    async def ingest_bytes(
        self,
        data: bytes,
        *,
        name: str,
        fmt: str,
        text_field: str = "text",
        skip_empty: bool = False,
        read_as: ConvertOptions | None = None,
        notices: list[str] | None = None,
    ) -> str:
        """Parse and store a document; return its id (the same bytes, read the same way,
        give the same id).

        ``skip_empty``: leave out JSONL/CSV/XLSX records whose text is empty (an
        :class:`EmptyRecordsSkipped` warning lists their lines) instead of refusing them.
        ``read_as``: how HTML, DOCX, PPTX and tables are read
        (``ConvertOptions(html_all=..., table_rows=..., pptx_notes=...)``); ``notices``
        receives what is worth saying about the file (XLSX sheets skipped).
        """
        blocks = parse_checked(
            data,
            fmt,
            text_field=text_field,
            skip_empty=skip_empty,
            options=read_as,
            notices=notices,
        )
        return await self.ingest_blocks(
            data, blocks, name=name, fmt=fmt, read_as=read_as, text_field=text_field
        )

    async def ingest_blocks(
        self,
        data: bytes,
        blocks: list[ParsedBlock],
        *,
        name: str,
        fmt: str,
        read_as: ConvertOptions | None = None,
        text_field: str | None = None,
    ) -> str:
        """Store already parsed blocks; ``data`` (with the ``read_as`` options they were
        parsed with) is what the document id is hashed from. ``text_field``: the column that
        held each CSV/JSONL/XLSX record's text when ``data`` is that file, so exports give
        rows back the file's columns in order."""
        columns = None if text_field is None else record_columns(data, fmt, blocks, text_field)
        async with self.pool.acquire() as conn:
            return await repo.save_document(
                conn, name, fmt, data, blocks, read_as, columns=columns, text_column=text_field
            )

    async def ingest_file(
        self,
        path: str | Path,
        *,
        fmt: str | None = None,
        text_field: str = "text",
        skip_empty: bool = False,
        read_as: ConvertOptions | None = None,
        notices: list[str] | None = None,
    ) -> str:
        """Parse and store a file (format from its extension unless given); return its id.
        ``skip_empty``: as for :meth:`ingest_bytes`."""
        path = Path(path)
        fmt = fmt or detect_format(path.name)
        check_size(path.stat().st_size, f"{fmt} file")  # refused before it is read
        return await self.ingest_bytes(
            path.read_bytes(),
            name=path.name,
            fmt=fmt,
            text_field=text_field,
            skip_empty=skip_empty,
            read_as=read_as,
            notices=notices,
        )

    async def add_schema(self, source: SchemaSource, name: str | None = None) -> str:
        """Validate and store a schema (a dict, a SchemaSpec, JSON text or a file path)."""
        async with self.pool.acquire() as conn:
            return await repo.save_schema(conn, as_schema(source, name))

    async def add_schema_file(self, path: str | Path) -> str:
        """Validate and store the schema in a JSON file; return its id."""
        return await self.add_schema(Path(path))

    # ------------------------------------------------------------------ models

    async def run_model(self, name: str) -> ModelInfo:
        """The model a run of ``name`` would use, checked before anything is created
        (:func:`blockbatch.api.quote.checked_model`: the Models API's facts first, where it
        answers; configured prices for a model the registry does not price).

        What a run uses is kept with it (``blockbatch.store.runs.save_models``): its
        workers read it there and never ask the Models API.

        Raises:
            RetiredModelError: retired; the message names the model to move to.
            UnknownModelError: neither the registry nor configuration prices it.
        """
        if self._models is None:
            client = configured_client(self.settings, timeout_s=READ_TIMEOUT_S)
            # No credentials: only facts kept by others.
            self._models = ModelFacts(client) if client is not None else None
        return await checked_model(name, self.settings, self.pool, self._models)

    # ------------------------------------------------------------------ quotes

    async def estimate(
        self,
        document: Document,
        schema: SchemaSource,
        options: RunOptions | None = None,
        **kwargs: Any,
    ) -> Quote:
        """What a run would do and cost, sync and batch side by side; creates nothing.

        ``document`` is a path or bytes (then ``fmt=``); earlier runs of the same schema and
        model in this database calibrate the expected output. See
        :func:`blockbatch.api.quote.estimate` for the keyword arguments (``count``,
        ``history``, ``fmt``, ``text_field``, ``skip_empty``, ``name``).
        """
        chosen = with_schema_model(options or RunOptions(), as_schema(schema).prompt_config.model)
        model = await self.run_model(chosen.model)
        return await estimate(
            document, schema, options, settings=self.settings, pool=self.pool, model=model, **kwargs
        )

    async def calibrate(
        self,
        document: Document,
        schema: SchemaSource,
        *,
        sample: int = DEFAULT_SAMPLE,
        sizes: Sequence[int] | str = DEFAULT_SIZES,
        target: float = DEFAULT_TARGET,
        model: str | None = None,
        fmt: str | None = None,
        name: str | None = None,
        text_field: str = "text",
        skip_empty: bool = False,
        task_queue: str | None = None,
    ) -> Calibration:
        """Which pack size keeps the answers a block gets alone? Runs a sample of
        ``sample`` blocks alone and at each of ``sizes`` (real runs, every call made), and
        recommends the largest size whose agreement with the alone answers meets
        ``target`` (see :mod:`blockbatch.api.calibrate`). Stored, so a quote of the schema
        and model mentions it.

        Raises:
            CalibrationError, BadRequest, SchemaError, IngestError, UnknownModelError,
                FileNotFoundError: bad input; nothing was created.
        """
        plan = prepare(
            document,
            schema,
            sample=sample,
            sizes=sizes,
            target=target,
            model=model,
            name=name,
            fmt=fmt,
            text_field=text_field,
            skip_empty=skip_empty,
        )
        return await run_calibration(self, plan, task_queue=task_queue)

    async def calibrate_models(
        self,
        document: Document,
        schema: SchemaSource,
        models: Sequence[str] | str,
        *,
        reference: str | None = None,
        escalation: bool = False,
        sample: int = DEFAULT_MODELS_SAMPLE,
        sizes: Sequence[int] | str = DEFAULT_SIZES,
        target: float = DEFAULT_TARGET,
        fmt: str | None = None,
        name: str | None = None,
        text_field: str = "text",
        skip_empty: bool = False,
        task_queue: str | None = None,
    ) -> ModelCalibration:
        """Which (model, pack size) is cheapest while keeping the answers ``reference``
        gives blocks alone? Runs the sample alone on ``reference`` (default: the priciest
        of ``models``) and at each of ``sizes`` on each of ``models``, quotes the whole
        document at each pair and picks the cheapest that meets ``target`` (see
        :mod:`blockbatch.api.calibrate`). Each model's result is stored, so a quote of
        the schema on that model names it.
        ``escalation``: also measure each candidate but the reference escalated to the
        reference (``--escalate-to``): the sample asked again in a second packing, the
        disagreeing blocks given the reference's alone answers; the choice may then be an
        escalated pair (:attr:`ModelChoice.escalate_to`).

        Raises:
            CalibrationError, BadRequest, SchemaError, IngestError, UnknownModelError,
                FileNotFoundError: bad input; nothing was created.
        """
        plan = prepare(
            document,
            schema,
            sample=sample,
            sizes=sizes,
            target=target,
            name=name,
            fmt=fmt,
            text_field=text_field,
            skip_empty=skip_empty,
            models=models,
            reference=reference,
            escalation=escalation,
        )
        return await run_model_calibration(self, plan, task_queue=task_queue)

    # ------------------------------------------------------------------ runs

    async def start_run(
        self,
        document_id: str,
        schema_id: str,
        options: RunOptions | None = None,
        *,
        run_id: str | None = None,
        packs_per_history: int = 400,
        task_queue: str | None = None,
    ) -> str:
        """Create the run row and start its RunWorkflow; return the run id.

        ``options.model`` left at the default takes the schema's ``prompt_config.model``.
        A run whose workflow cannot be started is deleted again. A model near its
        end-of-life is started all the same, with a :class:`ModelRetiring` warning; a
        retired one is refused. The Models API is read first where it answers
        (:meth:`run_model`).

        Raises:
            RetiredModelError: the model is retired (the message names the one to move
                to); nothing is created.
            UnknownModelError: neither the registry nor configuration prices the model.
            BudgetError: ``options.max_cost_usd`` cannot pay for the run's first call (the
                message names the smallest budget that can); nothing is created.
        """
        options = options or RunOptions()
        client = await self.temporal()
        async with self.pool.acquire() as conn:
            names = await repo.run_inputs(conn, document_id, schema_id)
            options = with_schema_model(options, names.definition["prompt_config"].get("model"))
            model = await self.run_model(options.model)
            check_effort(model, options.effort)
            options = options.model_copy(update={"model": model.id})
            used = [model]
            if options.quality is not None and options.quality.probe_model is not None:
                # Checked like the run's model, and kept by its id.
                probe = await self.run_model(options.quality.probe_model)
                quality = options.quality.model_copy(update={"probe_model": probe.id})
                options = options.model_copy(update={"quality": quality})
                used.append(probe)
            await check_start_budget(conn, document_id, schema_id, names.definition, options, model)
            retiring = retirement_warning(model, date.today())
            if retiring:
                warnings.warn(retiring, ModelRetiring, stacklevel=2)
            async with conn.transaction():
                run_id = await repo.create_run(conn, document_id, schema_id, options, run_id=run_id)
                # Resolved here, once: the workers read these, never the Models API.
                await runs.save_models(conn, run_id, used)
        try:
            await ensure_search_attributes(client, self.settings.temporal_namespace)
            await client.start_workflow(
                RunWorkflow.run,
                run_input(run_id, options, packs_per_history=packs_per_history),
                id=run_workflow_id(run_id),
                task_queue=task_queue or self.settings.temporal_task_queue,
                static_summary=f"run {run_id}: {names.document_name} × {names.schema_name} "
                f"({options.model})",
                static_details=_run_details(run_id, document_id, schema_id, options),
                search_attributes=_run_attributes(run_id, document_id, schema_id, options.model),
            )
        except Exception:
            # Leave no half-created run behind: a run row without a workflow is removed.
            async with self.pool.acquire() as conn:
                await repo.delete_run(conn, run_id)
            raise
        return run_id

    async def open_stream(
        self,
        schema: SchemaSource,
        *,
        max_rows: int | None = None,
        max_tokens: int | None = None,
        max_wait_s: float = 2.0,
        max_buffered: int = 5000,
        text_field: str = "text",
        options: RunOptions | None = None,
        name: str | None = None,
        run_id: str | None = None,
        packs_per_history: int = 400,
        task_queue: str | None = None,
    ) -> Stream:
        """Open a stream: a run whose rows are put while it runs (see
        :mod:`blockbatch.api.streams`); its StreamWorkflow is started at once.

        A pack forms when ``max_rows`` rows are buffered (``None``: a full pack by the
        model's rules), their estimated tokens reach ``max_tokens``, or the oldest has
        waited ``max_wait_s``; ``put`` waits while more than ``max_buffered`` rows are not
        done. Everything else is the run's ``options``, as for :meth:`start_run`.

        Raises:
            BadRequest: triggers that cannot hold (``max_rows`` above ``max_buffered``).
        """
        try:
            triggers = StreamTriggers(
                max_rows=max_rows,
                max_tokens=max_tokens,
                max_wait_s=max_wait_s,
                max_buffered=max_buffered,
            )
        except ValidationError as err:
            raise BadRequest(f"stream triggers: {err.errors()[0]['msg']}") from None
        schema_id = await self.add_schema(schema)
        client = await self.temporal()
        run_id = run_id or repo.new_run_id()
        async with self.pool.acquire() as conn:
            definition = await repo.schema_definition(conn, schema_id)
            options = with_schema_model(
                options or RunOptions(), definition["prompt_config"].get("model")
            )
            model = await self.run_model(options.model)
            options = options.model_copy(update={"model": model.id})
            retiring = retirement_warning(model, date.today())
            if retiring:
                warnings.warn(retiring, ModelRetiring, stacklevel=2)
            async with conn.transaction():
                document_id = await stream_store.create_stream(
                    conn, run_id, schema_id, options, triggers, text_field=text_field, name=name
                )
                await runs.save_models(conn, run_id, [model])
        try:
            await ensure_search_attributes(client, self.settings.temporal_namespace)
            await client.start_workflow(
                StreamWorkflow.run,
                stream_input(run_id, options, triggers, packs_per_history=packs_per_history),
                id=run_workflow_id(run_id),
                task_queue=task_queue or self.settings.temporal_task_queue,
                static_summary=f"stream {run_id}: rows × {schema_id} ({options.model})",
                static_details=_run_details(run_id, document_id, schema_id, options)
                + f"\n\nstream triggers: `{triggers.model_dump_json(exclude_none=True)}`",
                search_attributes=_run_attributes(run_id, document_id, schema_id, options.model),
            )
        except Exception:
            async with self.pool.acquire() as conn:
                await stream_store.delete_stream(conn, run_id)
            raise
        return await load_stream(self, run_id)

    async def stream(self, run_id: str) -> Stream:
        """An existing stream (e.g. after the producing process restarted): put more rows
        (re-putting a row under its key stores nothing twice), close it, read results.

        Raises:
            NotFound: no stream with this run id.
        """
        return await load_stream(self, run_id)

    async def retry(
        self,
        run_id: str,
        *,
        reasons: list[str] | None = None,
        blocks: list[str] | None = None,
        include_cancelled: bool = False,
        max_cost_usd: float | None = None,
        packs_per_history: int = 400,
        task_queue: str | None = None,
    ) -> RetryStarted:
        """Run a finished run's failed blocks again, in the same run; return once claimed.

        Only blocks that ended ``failed`` are taken (and ``cancelled`` ones with
        ``include_cancelled``), narrowed to those with one of ``reasons`` and to ``blocks``
        (uids or block indexes) when given. Blocks that succeeded are never sent again.
        The request is checked first, read-only; then a new execution of the run's
        workflow (same id, ``run-<run_id>``) claims the retry, resets those blocks and
        runs them in new packs. It answers the ``retry`` Update with its claim, or with
        why it refused (so this waits for a worker). Its counters, ledger and cost add to
        the run's. Follow it with :meth:`wait` and :meth:`progress` like any run. ``max_cost_usd`` sets a new
        budget for the whole run (what it spent already included): a run that ended
        ``budget_exhausted`` finishes its blocks within it.

        Raises:
            UnknownReason: a reason code that is not in blockbatch/core/reasons.py.
            NotFound: no such run (``UnknownBlock``: no such block in it).
            RunStillActive: the run has not finished; ``RetryUnderWay``: a retry of it is
                already running (two retries at once: one starts, the other gets this).
            NothingToRetry: nothing in the run matches the request (also when another
                retry took the blocks between the check and the claim).
            BlockNotRetryable: a named block did not fail (or is not in the selection).
            BudgetError: the budget cannot pay for the retry's first call.
        """
        checked = await self.check_retry(
            run_id,
            reasons=reasons,
            blocks=blocks,
            include_cancelled=include_cancelled,
            max_cost_usd=max_cost_usd,
        )
        client = await self.temporal()
        run = checked.run
        options = RunOptions.model_validate(run.settings)
        reasons_text = counts_text(checked.reasons)
        await ensure_search_attributes(client, self.settings.temporal_namespace)
        # Update-with-start: a new execution of the run's workflow (a closed id is reused)
        # claims the retry and answers the ``retry`` Update with its claim or its refusal.
        # A running execution of the id gets the Update instead, and refuses it.
        start = WithStartWorkflowOperation(
            RunWorkflow.run,
            run_input(run_id, options, packs_per_history=packs_per_history, retry=checked.request),
            id=run_workflow_id(run_id),
            task_queue=task_queue or self.settings.temporal_task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            static_summary=f"run {run_id}: retry {checked.number} of {checked.blocks} "
            f"block{'s' if checked.blocks != 1 else ''} ({reasons_text}) · "
            f"{run.document_name} × {run.schema_name} ({options.model})",
            static_details=(
                f"retry {checked.number} of run {run_id}, which was {run.status}: "
                f"{checked.blocks} blocks ({reasons_text}); asked for "
                f"`{checked.request.model_dump_json(exclude_defaults=True)}`\n\n"
                + _run_details(run_id, run.document_id, run.schema_id, options)
            ),
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(attributes.RUN_ID, run_id),
                    SearchAttributePair(attributes.DOCUMENT, run.document_id),
                    SearchAttributePair(attributes.SCHEMA, run.schema_id),
                    SearchAttributePair(attributes.MODEL, options.model),
                ]
            ),
        )
        try:
            claim = await client.execute_update_with_start_workflow(
                RunWorkflow.retry, start_workflow_operation=start
            )
        except WorkflowUpdateFailedError as err:
            raise _retry_refused(run_id, checked.number, err.cause) from None
        handle = await start.workflow_handle()
        assert handle.result_run_id is not None
        return RetryStarted(
            run_id=run_id,
            retry=claim.retry,
            blocks=claim.blocks,
            reasons=checked.reasons,
            request=checked.request,
            workflow_id=handle.id,
            workflow_run_id=handle.result_run_id,
        )

    async def escalate(
        self,
        run_id: str,
        model: str,
        *,
        second_pack_size: int | None = None,
        task_queue: str | None = None,
    ) -> str:
        """Escalate a finished run to ``model``; return the escalation's workflow id at once.

        Every block the run's model answered is asked again in a second packing; blocks
        whose two answers disagree, that failed or were refused are asked alone on
        ``model``, whose answer becomes their overlay (docs/ESCALATION.md);
        ``second_pack_size``: blocks per second-pass call (``EscalationOptions``). Follow it
        with :meth:`wait_escalation`; its summary is ``RunResult.escalation``.

        Raises:
            NotFound: no such run (``UnknownModelError``: no such model).
            RunStillActive: the run has not finished, or an escalation of it runs.
            BadRequest: the run was escalated already, did not run to its end
                (cancelled, failed, budget_exhausted), or ``model`` is the run's own.

        An escalation that stopped (cancelled, or an activity failed for good) goes on
        where it stopped when asked again with the same model: answers it recorded are
        not asked again, and no block is paid twice on a model.
        """
        info = await self.run(run_id)
        up_model = await self.run_model(model)
        up = up_model.id
        options = RunOptions.model_validate(info.settings)
        if info.active:
            raise RunStillActive(
                f"run {run_id} is {info.status}: escalate it once it has finished "
                f"(`{PROG} watch {run_id}`)"
            )
        if info.status not in ESCALATED_STATUSES:
            raise BadRequest(
                f"run {run_id} ended {info.status}: only a run that ran to its end is "
                f"escalated; retry it first (`{PROG} retry {run_id} --cancelled`)"
            )
        if up == options.model:
            raise BadRequest(f"run {run_id} ran on {up} already: escalate to a stronger model")
        before = await escalations.result(self.pool, run_id)
        if before is not None:
            # A run is escalated once; one that stopped (cancelled, or failed for good) goes
            # on where it stopped, to the same model: what it recorded is not asked again.
            if before.status not in ("cancelled", "failed"):
                raise BadRequest(f"run {run_id} was escalated already: a run is escalated once")
            if before.model != up:
                raise BadRequest(
                    f"run {run_id}'s escalation to {before.model} stopped with "
                    f"{before.left} blocks left: go on with `--to {before.model}`"
                )
        client = await self.temporal()
        # Resolved here, once, and kept with the run: its workers read it from there.
        await runs.save_models(self.pool, run_id, [up_model])
        try:
            handle = await client.start_workflow(
                EscalateWorkflow.run,
                EscalateInput(
                    run_id=run_id,
                    model=up,
                    second_pack_size=EscalationOptions(
                        second_pack_size=second_pack_size
                    ).second_pack_size,
                    max_concurrent_packs=options.max_concurrent_packs,
                ),
                id=escalate_workflow_id(run_id),
                task_queue=task_queue or self.settings.temporal_task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                static_summary=f"run {run_id}: escalation from {options.model} to {up} · "
                f"{info.document_name} × {info.schema_name}",
            )
        except WorkflowAlreadyStartedError:
            raise RunStillActive(f"an escalation of run {run_id} is already under way") from None
        return handle.id

    async def _cancel_escalation(self, run_id: str) -> bool:
        """Signal the run's escalation to stop, if one runs (queued, planning or under
        way); whether one did."""
        if not await self.escalation_running(run_id):
            return False
        handle = self.client.get_workflow_handle_for(
            EscalateWorkflow.run, escalate_workflow_id(run_id)
        )
        try:
            await handle.signal(EscalateWorkflow.cancel)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return False
        return True

    async def wait_escalation(self, run_id: str) -> RunResult:
        """Wait for a run's escalation to end; the run's result, with ``escalation`` set."""
        client = await self.temporal()
        return await client.get_workflow_handle_for(
            EscalateWorkflow.run, escalate_workflow_id(run_id)
        ).result()

    async def escalation(self, run_id: str) -> EscalationResult | None:
        """What the run's escalation did (``None``: never escalated)."""
        return await escalations.result(self.pool, run_id)

    async def escalation_progress(self, run_id: str) -> EscalationProgress:
        """The run's escalation as it goes, from Postgres (no worker needed): its phase,
        second packs done, blocks compared, kept and sent up, answered, cost so far.
        ``phase`` is ``planning`` while it has no row, also for a run never escalated:
        :meth:`escalation_running` says whether one runs."""
        return await escalations.progress(self.pool, run_id)

    async def escalation_running(self, run_id: str) -> bool:
        """Whether the run's escalation workflow (``run-<run_id>/escalate``) is running.

        Temporal is asked only when one may run: the run is active (an escalation reopens
        it), or it ended as an escalated run ends and has no escalation row yet (queued, or
        planning)."""
        read = await escalations.run_status_and_model(self.pool, run_id)
        if read is None:
            await self.run(run_id)  # raises NotFound
            return False
        status, model = read
        if status not in UNFINISHED and (status not in ESCALATED_STATUSES or model is not None):
            return False
        client = await self.temporal()
        try:
            described = await client.get_workflow_handle(escalate_workflow_id(run_id)).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return described.status == WorkflowExecutionStatus.RUNNING

    async def check_retry(
        self,
        run_id: str,
        *,
        reasons: list[str] | None = None,
        blocks: list[str] | None = None,
        include_cancelled: bool = False,
        max_cost_usd: float | None = None,
    ) -> CheckedRetry:
        """What :meth:`retry` would take (blocks, by reason), read-only; raises as it would."""
        async with self.pool.acquire() as conn:
            return await check_retry_request(
                conn,
                run_id,
                reasons=reasons,
                blocks=blocks,
                include_cancelled=include_cancelled,
                max_cost_usd=max_cost_usd,
            )

    async def retries(self, run_id: str) -> list[RetryRecord]:
        """Every retry of the run, first first (what it took, when, how it ended)."""
        return await retry_log.history(self.pool, run_id)

    async def retry_claimed(self, started: RetryStarted) -> RetryRecord | None:
        """The retry as claimed by its workflow; ``None`` while (or if never) claimed."""
        return await retry_log.claimed_by(self.pool, started.run_id, started.workflow_run_id)

    async def workflow_running(self, run_id: str) -> bool:
        """Whether the run's workflow (its latest execution) is running, e.g. a retry that
        has started but not yet claimed the run."""
        await self.temporal()
        try:
            described = await self.handle(run_id).describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return described.status == WorkflowExecutionStatus.RUNNING

    def handle(self, run_id: str) -> WorkflowHandle[Any, RunResult]:
        """The Temporal handle of a run's RunWorkflow."""
        return self.client.get_workflow_handle_for(RunWorkflow.run, run_workflow_id(run_id))

    async def progress(self, run_id: str, *, timeout_s: float = 5.0) -> RunProgress:
        """Live counters from the running workflow (needs a worker to answer)."""
        await self.temporal()
        return await self.handle(run_id).query(
            RunWorkflow.progress, rpc_timeout=timedelta(seconds=timeout_s)
        )

    async def wait(self, run_id: str) -> RunResult:
        """Wait for a run's workflow to end and return its result."""
        await self.temporal()
        return await self.handle(run_id).result()

    async def cancel(self, run_id: str) -> reads.RunInfo:
        """Ask a run to stop (no new Claude call starts); return the run as it was
        (:meth:`request_cancel` says whether a worker took the request yet)."""
        return (await self.request_cancel(run_id)).info

    async def request_cancel(self, run_id: str) -> CancelRequest:
        """Ask a run to stop (no new Claude call starts), with or without a worker.

        With a worker polling the run's task queue, the ``cancel`` Update returns once the
        run's workflow took it, or says why it refused. An Update waits for a worker to
        accept it (docs.temporal.io, "Workflow message passing": unlike Signals, Updates
        must wait for the Worker running the Workflow to acknowledge the request), so with
        none, or none taking it within :data:`CANCEL_UPDATE_WAIT_S`, the request goes as the
        ``request_cancel`` signal instead: the server records a Signal in the workflow's
        history before it answers, and the next worker carries it out
        (``CancelRequest.waits_for_worker``). A run being escalated: its escalation is
        signalled instead, also while it is queued or planning, when the run is still as
        it ended (:meth:`escalation_running` says whether one runs).

        Raises:
            BadRequest: the run is finishing already (the workflow's reason), or its
                workflow is not running.
        """
        info = await self.run(run_id)
        if not info.active:
            # Temporal down: no escalation could run either; the run is as it ended.
            with contextlib.suppress(TemporalUnavailable):
                await self._cancel_escalation(run_id)
            return CancelRequest(info=info)
        await self.temporal()
        if await self._cancel_escalation(run_id):
            return CancelRequest(info=info)
        handle = self.handle(run_id)
        queue = self.settings.temporal_task_queue
        try:
            queue = (await handle.describe()).task_queue
            if await self.workers_polling(queue):
                await handle.execute_update(
                    RunWorkflow.cancel, rpc_timeout=timedelta(seconds=CANCEL_UPDATE_WAIT_S)
                )
                return CancelRequest(info=info)
            await handle.signal(RunWorkflow.request_cancel)
            return CancelRequest(info=info, waits_for_worker=True, task_queue=queue)
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            # A worker polled a moment ago but none took the Update: record it as a signal.
            await handle.signal(RunWorkflow.request_cancel)
            return CancelRequest(info=info, waits_for_worker=True, task_queue=queue)
        except WorkflowUpdateFailedError as err:
            # The run is finishing: its workflow says so, and why.
            cause = err.cause
            raise BadRequest(getattr(cause, "message", None) or str(cause)) from None
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            raise BadRequest(
                f"run {run_id} is {info.status} but its workflow is not running "
                f"(terminated in the Temporal UI?): nothing to cancel"
            ) from None

    async def workers_polling(self, task_queue: str | None = None) -> int:
        """How many workers polled the task queue recently (0: runs would wait)."""
        client = await self.temporal()
        resp = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=self.settings.temporal_namespace,
                task_queue=TaskQueue(name=task_queue or self.settings.temporal_task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        return len(resp.pollers)

    async def endpoint_warning(self, task_queue: str | None = None) -> str | None:
        """Why this process's Claude settings (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``)
        are not the ones the live workers on the task queue call with (blockbatch/core/endpoint.py);
        ``None`` when they agree or no worker said. The workers' answers are what a run
        gets, whatever this process is set for."""
        queue = task_queue or self.settings.temporal_task_queue
        try:
            key: str | None = self.settings.resolved_api_key()
        except RuntimeError:
            key = None
        own = endpoint_of(
            self.settings.resolved_anthropic_base_url,
            simulated=self.settings.uses_simulator,
            api_key=key,
        )
        return mismatch_text(own, await workers.live(self.pool, queue), queue)

    async def answering_endpoint(self, task_queue: str | None = None) -> Endpoint | None:
        """The endpoint a run on the task queue would be answered by (its provider and
        host), the one whose earlier answers it may reuse (blockbatch/api/answering.py)."""
        return await answering_endpoint(self.pool, self.settings, task_queue)

    # ------------------------------------------------------------------ reading and review

    async def run(self, run_id: str) -> RunInfo:
        """One run as stored (raises NotFound for an unknown id)."""
        return await reads.get_run(self.pool, run_id)

    async def runs(self, *, limit: int = 20, status: str | None = None) -> list[RunInfo]:
        """The newest runs, optionally only those in ``status``."""
        return await reads.list_runs(self.pool, limit=limit, status=status)

    async def result(self, run_id: str) -> RunResult:
        """The run's counters and failure reasons from Postgres (final once it has finished)."""
        return await self.result_of(await self.run(run_id))

    async def result_of(self, info: RunInfo) -> RunResult:
        """:meth:`result` of a run already read (``info``): its failure reasons, re-plans
        and quality probe read beside it."""
        return info.result().model_copy(
            update={
                "failure_reasons": await self.failure_reasons(info.run_id),
                "plan_changes": await self.plan_changes(info.run_id),
                "quality": await self.quality(info.run_id),
                "escalation": await self.escalation(info.run_id),
            }
        )

    async def quality(self, run_id: str) -> QualityResult | None:
        """What the run's quality probe found so far: agreement overall (with its 95%
        interval), per field, pack size and position; the probe's calls and cost; the pack
        size the run settled on and what the quality gate did (``None``: no probe)."""
        return await quality.result(self.pool, run_id)

    async def disagreeing(
        self, run_id: str, *, limit: int = 50, offset: int = 0
    ) -> tuple[int, list[Disagreement]]:
        """``(total, page)`` of the run's sampled blocks whose packed and single answers
        differ, both answers side by side with the comparison per field."""
        return await quality.disagreeing(self.pool, run_id, limit=limit, offset=offset)

    async def limits(self) -> list[LimiterView]:
        """The fleet's rate limiters (per API key hash and model), refilled to now."""
        return await ratelimits.views(self.pool)

    async def plan_changes(self, run_id: str) -> list[str]:
        """What the run's re-plans changed (packs that learn from the run's answers)."""
        return await replans.change_texts(self.pool, run_id)

    async def failure_reasons(self, run_id: str) -> dict[str, int]:
        """Reason code -> count over the run's failed and cancelled blocks, most first."""
        return await runs.failure_reasons(self.pool, run_id)

    async def review_flags(self, run_id: str) -> dict[str, int]:
        """Review flag -> count over the run's answered blocks (``ungrounded``)."""
        return await review.review_flags(self.pool, run_id)

    async def review(
        self, run_id: str, *, id_columns: list[str] | None = None, **filters: Any
    ) -> ReviewPage:
        """Blocks next to their overlays; see :func:`blockbatch.store.reads.review_page` for
        the filters. ``id_columns``: the input's columns that say which row each block is
        (default: the first column other than the text; the page's ``id_columns``).

        Raises:
            BadRequest: an id column the input does not have.
        """
        page = await reads.review_page(self.pool, run_id, **filters)
        present = [k for item in page.items for k in item.metadata]
        page.id_columns = await self._id_columns(run_id, id_columns, present)
        return page

    async def _id_columns(
        self, run_id: str, chosen: list[str] | None, present: list[str]
    ) -> list[str]:
        document_id = (await self.run(run_id)).document_id
        stored = await reads.document_columns(self.pool, document_id)
        columns, text = stored if stored is not None else (None, None)
        try:
            return identifying_columns(columns, text, chosen, list(dict.fromkeys(present)))
        except ValueError as err:
            raise BadRequest(str(err)) from None

    async def calls(self, run_id: str, **filters: Any) -> tuple[int, list[CallRow]]:
        """(total, page) of the run's call ledger; see :func:`blockbatch.store.reads.list_calls`."""
        return await reads.list_calls(self.pool, run_id, **filters)

    async def call(self, run_id: str, call_id: int, full: bool = False) -> CallDetail:
        """One ledger row of the run in full: purpose, provider, status, timing, tokens,
        cost, Temporal ids, the request as sent and the raw response or error. The system
        prompt and tool definitions are elided (first characters, length, sha256) unless
        ``full``. Raises NotFound for an unknown run or a call that is not the run's."""
        return await reads.get_call(self.pool, run_id, call_id, full=full)

    async def confirm(
        self,
        run_id: str,
        blocks: list[str] | None = None,
        *,
        reviewer: str | None = None,
    ) -> ConfirmOutcome:
        """Staging -> confirmed for ``blocks`` (uids or indexes), or all ai_complete blocks;
        each recorded for ``reviewer`` (default ``$BLOCKBATCH_REVIEWER``, else the OS user)."""
        return await confirm(self.pool, run_id, blocks, reviewer)

    async def reject(
        self,
        run_id: str,
        blocks: list[str] | None,
        *,
        reviewer: str | None = None,
    ) -> RejectOutcome:
        """Staging -> rejected for ``blocks`` (uids or indexes; ``None``: every ai_complete
        block), all or nothing, each recorded for ``reviewer``."""
        return await reject(self.pool, run_id, blocks, reviewer)

    async def reopen(
        self,
        run_id: str,
        blocks: list[str],
        *,
        reviewer: str | None = None,
    ) -> ReopenOutcome:
        """Confirmed -> staged (ai_complete) for ``blocks`` (uids or indexes), to correct
        them and confirm again; all or nothing, each recorded for ``reviewer``."""
        return await reopen(self.pool, run_id, blocks, reviewer)

    async def edit(
        self,
        run_id: str,
        block: str,
        field: str,
        value: Any,
        *,
        reviewer: str | None = None,
        as_text: bool = False,
    ) -> EditOutcome:
        """Set one staged field of an ai_complete block (uid or index); the overlay must
        still validate against the run's schema, else :class:`EditError` and nothing
        changes. ``as_text``: ``value`` is typed text (as is for a string field, else
        JSON). Recorded for ``reviewer`` with the value before and after."""
        return await edit(
            self.pool, run_id, block, field, value, reviewer=reviewer, as_text=as_text
        )

    async def review_actions(
        self,
        run_id: str,
        block: str | None = None,
        *,
        limit: int = 200,
    ) -> list[ReviewAction]:
        """The run's recorded review acts (or one block's, by uid), newest first (none for
        an unknown run)."""
        return await review.review_actions(self.pool, run_id, block, limit=limit)

    async def review_activity(
        self,
        run_id: str,
        *,
        limit: int = 20,
    ) -> list[ReviewActivity]:
        """The run's latest review acts as they were done, newest first: a bulk confirm
        of many blocks is one entry (with how many), an edit is one with its values."""
        return await review.review_activity(self.pool, run_id, limit=limit)

    async def grid(
        self,
        run_id: str,
        *,
        status: str | None = None,
        reason: str | None = None,
        block_type: str | None = None,
        limit: int = 50,
        after: int | None = None,
        before: int | None = None,
        disagreeing: bool = False,
        id_columns: list[str] | None = None,
    ) -> GridPage:
        """A page of the run's blocks and overlays, paged by block index (keyset);
        ``disagreeing``: only those the quality probe found disagreeing; ``id_columns``: as
        :meth:`review`."""
        flt = GridFilter(
            status=status, reason=reason, block_type=block_type, disagreeing=disagreeing
        )
        page = await review.grid_page(
            self.pool, run_id, flt, limit=limit, after=after, before=before
        )
        present = [k for row in page.rows for k in row.metadata]
        page.id_columns = await self._id_columns(run_id, id_columns, present)
        return page

    async def block_page(self, run_id: str, block_uid: str, *, width: int | None = None) -> bytes:
        """A PDF block's page as PNG bytes with the block's box outlined
        (blockbatch/api/pages.py); ``width`` in pixels, bounded.

        Raises:
            NotFound: no such run or block, or the block has no page to show.
        """
        return await block_page_png(self.pool, run_id, block_uid, width=width)

    async def live_costs(self, run_ids: list[str]) -> dict[str, float]:
        """Cost so far of each run, from its ledger (for runs still going)."""
        return await review.live_costs(self.pool, run_ids)

    async def block_types(self, run_id: str) -> list[str]:
        """The block types of the run's document."""
        return await self.block_types_of((await self.run(run_id)).document_id)

    async def block_types_of(self, document_id: str) -> list[str]:
        """The block types of a document."""
        return await review.block_types(self.pool, document_id)

    async def export(
        self,
        run_id: str,
        out: str | Path | TextIO,
        *,
        staged: bool = False,
        fmt: ExportFormat = "jsonl",
    ) -> ExportSummary:
        """JSONL (or CSV with ``fmt="csv"``), one line per block in order, review acts
        included; a path also gets a ``.meta.json`` sidecar. ``fmt="parquet"`` writes a
        path only (blockbatch/api/parquet.py)."""
        if fmt == "parquet" and isinstance(out, str | Path):
            return await export_parquet(self.pool, run_id, out, staged=staged)
        if isinstance(out, str | Path):
            return await export_run_to_file(self.pool, run_id, out, staged=staged, fmt=fmt)
        return await export_to(self.pool, run_id, out, staged=staged, fmt=fmt)


def _retry_refused(run_id: str, number: int, cause: BaseException) -> RetryRefused:
    """The error for a retry the run's workflow refused (the ``retry`` Update's failure)."""
    kind = cause.type if isinstance(cause, ApplicationError) else None
    message = cause.message if isinstance(cause, ApplicationError) else str(cause)
    if kind == RETRY_UNDER_WAY:
        return RetryUnderWay(
            f"a retry of run {run_id} is already under way (its workflow "
            f"{run_workflow_id(run_id)} is running): follow it with "
            f"`{PROG} watch {run_id}`"
        )
    error = {RUN_NOT_FINISHED: RunStillActive, NOTHING_TO_RETRY: NothingToRetry}.get(
        kind or "", RetryRefused
    )
    return error(f"retry {number} of run {run_id} was refused: {message}")


def _run_attributes(
    run_id: str, document_id: str, schema_id: str, model: str
) -> TypedSearchAttributes:
    """The search attributes of a run's (or stream's) workflow: its packs carry the same."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(attributes.RUN_ID, run_id),
            SearchAttributePair(attributes.DOCUMENT, document_id),
            SearchAttributePair(attributes.SCHEMA, schema_id),
            SearchAttributePair(attributes.MODEL, model),
        ]
    )


def _run_details(run_id: str, document_id: str, schema_id: str, options: RunOptions) -> str:
    opts = json.dumps(options.model_dump(mode="json", exclude_defaults=True)) or "{}"
    return (
        f"document `{document_id}` · schema `{schema_id}` · model `{options.model}`\n\n"
        f"options: `{opts}`\n\n"
        f'packs: list filter `BlockbatchRunId = "{run_id}"`, or workflow ids '
        f"`run-{run_id}/pack-<n>` (halves: `.../pack-<n>.0`, `.1`)"
    )


async def open_default() -> Blockbatch:
    """Connect with settings from the environment."""
    return await Blockbatch.connect(load_settings())
