"""Configuration from the environment, read once at the entry points.

Every process (worker, starter, stack manager, tests) builds one :class:`Settings`.
Secrets are held as ``SecretStr`` so they never appear in a ``repr`` or a log line.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cached_property
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The API key the embedded stack hands the simulator. Not a secret: the simulator
#: accepts any key unless a scenario says otherwise.
SIMULATOR_API_KEY = "sim-local-key"


class Settings(BaseSettings):
    """All knobs of blockbatch. Each field is read from the environment variable of the
    same name (case-insensitive)."""

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False)

    # Where the local stack keeps its data, logs and pid files.
    blockbatch_data_dir: Path = Path(".data")

    # Postgres.
    database_url: str | None = Field(
        default=None,
        description="postgresql://user@host:port/db; unset = the embedded Postgres of `make up`.",
    )
    pg_port: int = 55432
    pg_database: str = "blockbatch"

    # Temporal.
    temporal_address: str | None = None
    temporal_namespace: str = "default"
    temporal_port: int = 7233
    temporal_ui_port: int = 8233
    temporal_ui_url: str | None = None
    temporal_task_queue: str = "blockbatch"

    # Claude (real or simulated).
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    simulator_port: int = 8765
    anthropic_timeout_s: float = 600.0
    #: Prices of models the registry does not price but the Models API describes (a model
    #: released after this version), USD per million tokens, as JSON:
    #: ``{"claude-x-6": {"input": 1.0, "output": 5.0, "cache_read": 0.1}}`` (``input`` and
    #: ``output`` required; cache writes and reads default to 1.25x, 2x and 0.1x input).
    #: A run on such a model says it is priced from configuration.
    blockbatch_model_prices: dict[str, dict[str, float]] = Field(default_factory=dict)

    # Other providers (docs/providers.md). Their SDK clients read their own variables
    # (AWS_REGION, AWS_BEARER_TOKEN_BEDROCK, CLOUD_ML_REGION, ANTHROPIC_FOUNDRY_API_KEY ...)
    # straight from the environment; blockbatch holds only what the SDK does not read.
    #: A Google access token for Vertex (``gcloud auth print-access-token``); unset, the
    #: Vertex client uses Application Default Credentials (needs ``blockbatch[vertex]``).
    anthropic_vertex_access_token: SecretStr | None = None
    #: A Google access token for Anthropic-managed Google Cloud (``--provider google-cloud``);
    #: unset, its client uses Application Default Credentials (``blockbatch[google-cloud]``).
    anthropic_google_cloud_access_token: SecretStr | None = None
    #: Foundry deployment names and the model each serves, as JSON:
    #: ``{"team-haiku": "claude-haiku-5-5"}`` (unnamed: a deployment is named after its model).
    blockbatch_foundry_deployments: dict[str, str] = Field(default_factory=dict)
    #: An OpenAI-compatible gateway's chat completions base URL (``--provider gateway``):
    #: ``{base}/chat/completions``; OpenRouter's unless told.
    blockbatch_gateway_base_url: str = "https://openrouter.ai/api/v1"
    #: The gateway's key, sent as ``Authorization: Bearer``; unset, ``OPENROUTER_API_KEY``.
    blockbatch_gateway_api_key: SecretStr | None = None
    openrouter_api_key: SecretStr | None = None

    # Worker concurrency. A Claude call that waits for the fleet's rate limiter waits inside
    # its activity and holds a slot: with few slots, other runs' short database steps queue
    # behind the waiting calls (docs/benchmarks.md 4d). Slots are cheap (asyncio); connections are
    # not: the pool is sized apart, as no activity holds a connection while it waits.
    worker_max_concurrent_activities: int = 100
    worker_db_pool_size: int = 30
    worker_max_concurrent_workflow_tasks: int = 50
    #: How long a workflow task waits for a worker that may be gone: a task a worker holds
    #: is given to another after this long (the workflow task timeout of each run, stream
    #: and escalation this process starts; their packs and halves keep their run's), and so
    #: is one waiting for the worker that last ran its workflow (the worker's sticky queue).
    #: Temporal's default; tests that kill workers set it low. Not below 1 s: a task that a
    #: busy worker takes longer than this over is timed out and replayed from its whole
    #: history by the next worker, which takes longer still, and again.
    workflow_task_timeout_s: float = Field(default=10.0, ge=1, le=120)

    # Worker Versioning (docs/VERSIONING.md): set both to register this worker as one build
    # of a deployment; unset, the worker is unversioned (local stack, tests).
    worker_deployment_name: str | None = None
    worker_build_id: str | None = None

    # Metrics (docs/metrics.md): a worker serves Prometheus metrics, Temporal's and
    # blockbatch's, on http://METRICS_HOST:METRICS_PORT/metrics; unset = no endpoint.
    # Localhost unless told otherwise (a container sets 0.0.0.0 for Prometheus to reach it).
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    metrics_host: str = "127.0.0.1"

    @field_validator(
        "anthropic_api_key",
        "anthropic_base_url",
        "anthropic_vertex_access_token",
        "anthropic_google_cloud_access_token",
        "blockbatch_gateway_api_key",
        "openrouter_api_key",
        "database_url",
        "temporal_address",
        "temporal_ui_url",
        "worker_deployment_name",
        "worker_build_id",
        "metrics_port",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # `FOO=` in a shell or a compose file means "not set", not "the empty string".
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("blockbatch_model_prices", "blockbatch_foundry_deployments", mode="before")
    @classmethod
    def _no_prices(cls, value: object) -> object:
        return {} if value is None or (isinstance(value, str) and not value.strip()) else value

    @cached_property
    def data_dir(self) -> Path:
        return self.blockbatch_data_dir.resolve()

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or (
            f"postgresql://postgres@127.0.0.1:{self.pg_port}/{self.pg_database}"
        )

    @property
    def workflow_task_timeout(self) -> timedelta:
        return timedelta(seconds=self.workflow_task_timeout_s)

    @property
    def resolved_temporal_address(self) -> str:
        return self.temporal_address or f"127.0.0.1:{self.temporal_port}"

    @property
    def resolved_temporal_ui_url(self) -> str:
        return (self.temporal_ui_url or f"http://localhost:{self.temporal_ui_port}").rstrip("/")

    @property
    def uses_simulator(self) -> bool:
        """True when no real API key is configured: the embedded simulator stands in."""
        return self.anthropic_api_key is None and self.anthropic_base_url is None

    @property
    def resolved_anthropic_base_url(self) -> str | None:
        if self.uses_simulator:
            return f"http://127.0.0.1:{self.simulator_port}"
        return self.anthropic_base_url

    def resolved_api_key(self) -> str:
        """The key to hand the anthropic client. Never log the result."""
        if self.anthropic_api_key is not None:
            return self.anthropic_api_key.get_secret_value()
        if self.anthropic_base_url is None or self.uses_simulator:
            return SIMULATOR_API_KEY
        raise RuntimeError(
            "ANTHROPIC_BASE_URL is set but ANTHROPIC_API_KEY is not: set ANTHROPIC_API_KEY, "
            "or unset ANTHROPIC_BASE_URL to use the local simulator."
        )

    def run_url(self, workflow_id: str) -> str:
        """Temporal UI link of one workflow."""
        from urllib.parse import quote

        return (
            f"{self.resolved_temporal_ui_url}/namespaces/{self.temporal_namespace}"
            f"/workflows/{quote(workflow_id, safe='')}"
        )


def load_settings() -> Settings:
    return Settings()
