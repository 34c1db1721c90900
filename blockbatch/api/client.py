"""The :class:`Blockbatch` client: ingest, start, follow, review, confirm and export runs.

``Blockbatch`` composes one part per mechanism, each a class of its own module over
:class:`~blockbatch.api.connection.Connection` (Postgres, Temporal, the Models API):

| part | module | what |
|---|---|---|
| ``Documents`` | ``documents.py`` | ingest documents, store schemas |
| ``Runs`` | ``runs.py`` | start runs and streams, follow them, cancel them |
| ``Escalations`` | ``escalation.py`` | escalate a finished run, follow and stop it |
| ``Retries`` | ``retry.py`` | retry a finished run's failed blocks |
| ``Reading`` | ``reading.py`` | results, quality, ledger, review acts, grid, exports |

and adds the quote and calibration here (their modules imported when first used).
Workflows are started and asked by their registered names
(blockbatch/core/workflow_names.py): no front door imports a workflow or an activity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from blockbatch.api.errors import speaks_python
from blockbatch.api.inputs import SchemaSource, as_schema, with_schema_model
from blockbatch.api.reading import Reading
from blockbatch.api.retry import Retries
from blockbatch.api.runs import CancelRequest, Runs
from blockbatch.core.calibration import (
    DEFAULT_MODELS_SAMPLE,
    DEFAULT_SAMPLE,
    DEFAULT_SIZES,
    DEFAULT_TARGET,
)
from blockbatch.core.run_types import RunOptions
from blockbatch.runtime.settings import load_settings

if TYPE_CHECKING:
    from blockbatch.api.quote import Document
    from blockbatch.core.calibration import Calibration, ModelCalibration
    from blockbatch.core.quote import Quote

__all__ = ["Blockbatch", "CancelRequest", "open_default"]


@speaks_python
class Blockbatch(Runs, Retries, Reading):
    """One connection to Postgres and (lazily) Temporal; use as an async context manager.

    An error's advice names the next command as the ``blockbatch`` console script's and
    options as this API's parameters; a front door that words errors itself (the CLI) sets
    ``renders_errors`` to ``False`` and renders ``blockbatch.core.commands`` itself.
    """

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
        from blockbatch.api.quote import estimate

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
        from blockbatch.api.calibrate import prepare, run_calibration

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
        from blockbatch.api.calibrate import prepare, run_model_calibration

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


async def open_default() -> Blockbatch:
    """Connect with settings from the environment."""
    return await Blockbatch.connect(load_settings())
