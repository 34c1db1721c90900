"""Connecting to Temporal: a client of the configured namespace, and blockbatch's search
attributes registered in it. Used by every front door, the worker and tests; it loads
none of the worker's modules (building the worker is blockbatch/runtime/temporal.py), and
Temporal's client only when it connects: a front door that reads Postgres alone (the CLI's
``list``) catches :class:`TemporalUnavailable` without loading it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from blockbatch.core.workflow_names import SEARCH_ATTRIBUTES
from blockbatch.runtime.settings import Settings

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.runtime import Runtime


class TemporalUnavailable(RuntimeError):
    """Temporal could not be reached; the message says where and what to do."""


async def connect(settings: Settings, runtime: Runtime | None = None) -> Client:
    """A client of the configured namespace; ``runtime``: one that serves metrics
    (``blockbatch.runtime.metrics.metrics_runtime``), else the SDK's default."""
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    address = settings.resolved_temporal_address
    try:
        return await Client.connect(
            address,
            namespace=settings.temporal_namespace,
            data_converter=pydantic_data_converter,
            runtime=runtime,
        )
    except RuntimeError as exc:
        raise TemporalUnavailable(
            f"cannot connect to Temporal at {address} ({exc}); start the local stack with "
            "`make up`, or set TEMPORAL_ADDRESS"
        ) from exc


async def ensure_search_attributes(client: Client, namespace: str) -> None:
    """Register blockbatch's search attributes if the namespace lacks them."""
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import (
        AddSearchAttributesRequest,
        ListSearchAttributesRequest,
    )
    from temporalio.service import RPCError

    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    missing = {k: v for k, v in SEARCH_ATTRIBUTES.items() if k not in listed.custom_attributes}
    if not missing:
        return
    kinds = {"Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD}
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace,
                search_attributes={k: kinds[v] for k, v in missing.items()},
            )
        )
    except RPCError as exc:
        commands = "; ".join(
            f"temporal operator search-attribute create --namespace {namespace} "
            f"--name {k} --type {v}"
            for k, v in missing.items()
        )
        raise TemporalUnavailable(
            f"namespace {namespace!r} lacks blockbatch's search attributes and they could not "
            f"be added ({exc.message}); ask a Temporal admin to run: {commands}"
        ) from exc
