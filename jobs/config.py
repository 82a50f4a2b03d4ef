"""Bulk-job settings: one pydantic-settings class read from `FINSERVE_*` variables.

The gateway (which accepts and enqueues jobs), the workers and the CLI all read this, so one
environment configures the whole stack. The lease is the heart of failure handling: a running
item whose lease has passed is presumed abandoned (its worker died) and may be claimed again,
and the broker's visibility timeout equals it, so Redis hands an unacknowledged message to
another worker at about the same moment SQL lets that worker take the item.
"""
from __future__ import annotations

from functools import lru_cache

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class JobsSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FINSERVE_", frozen=True, extra="ignore")

    broker_url: str = "redis://127.0.0.1:6379/0"
    gateway_url: str = "http://127.0.0.1:8000"  # workers reach the engine through the gateway
    api_key: str | None = None  # the workers' key; None: $FINSERVE_HOME/dev_key (the embedded stack)

    # --- limits on what a job may be (checked before anything is written) ---
    jobs_max_items: int = Field(10_000, gt=0)
    jobs_max_text_chars: int = Field(200_000, gt=0)  # per contract; the class's token limit still applies
    jobs_max_schema_fields: int = Field(64, gt=0)
    jobs_default_max_tokens: int = Field(256, gt=0)

    # --- worker behaviour ---
    jobs_lease_s: float = Field(600.0, gt=0)  # = broker visibility timeout
    jobs_request_timeout_s: float = Field(540.0, gt=0)  # one engine call; must end inside the lease
    jobs_invalid_output_attempts: int = Field(3, ge=1)  # calls per item before "failed: invalid output"
    jobs_transient_retries: int = Field(40, ge=0)  # 429/503/connection retries before giving up
    jobs_backoff_base_s: float = Field(1.0, gt=0)
    jobs_backoff_max_s: float = Field(30.0, gt=0)
    jobs_restore_interval_s: float = Field(10.0, gt=0)  # how often workers look for unacked messages
    worker_concurrency: int = Field(4, gt=0)  # items in flight per worker process

    @model_validator(mode="after")
    def _timeout_inside_lease(self) -> "JobsSettings":
        if self.jobs_request_timeout_s >= self.jobs_lease_s:
            raise ValueError("FINSERVE_JOBS_REQUEST_TIMEOUT_S must be shorter than FINSERVE_JOBS_LEASE_S")
        return self


@lru_cache(maxsize=1)
def jobs_settings() -> JobsSettings:
    return JobsSettings()
